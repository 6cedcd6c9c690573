//! Snapshot files: each snapshot's bytes in a file of `<data_dir>/snapshots`, written as
//! the state is encoded (no copy of the whole encoding in memory) and made current by an
//! atomic rename; the state-machine store names the current file in sled beside the
//! snapshot's metadata (decision #122).
//!
//! A file is written as `<name>.N.tmp` (under the state's read lock, so without a sync),
//! synced (after the lock is released), renamed to `<name>` and the directory synced before
//! sled names it, so the file sled names is always whole. Files sled does not name
//! (a crash between the rename and sled's flush, or a replaced snapshot) are removed once
//! a newer one is named, and when the store opens.
//!
//! Owns: the directory. Woken by: nothing (the store calls it). Stops: with the store.

use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Buffer between the encoder and the file: large writes, little memory.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// The directory of a node's snapshot files.
#[derive(Debug)]
pub(crate) struct SnapshotFiles {
    dir: PathBuf,
    /// Makes temporary names unique within the process.
    temps: AtomicU64,
}

/// A whole snapshot file not yet renamed into place.
#[derive(Debug)]
pub(crate) struct Written {
    temp: PathBuf,
    file: File,
    /// The name it takes when published.
    pub(crate) name: String,
    /// Its length in bytes.
    pub(crate) bytes: u64,
}

impl Written {
    /// Syncs the file's bytes to disk: before [`SnapshotFiles::publish`], and away from the
    /// state's lock (a sync of a large snapshot takes a fraction of a second).
    pub(crate) fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

impl SnapshotFiles {
    /// The snapshot directory under `data_dir`, created if missing.
    pub(crate) fn open(data_dir: &Path) -> io::Result<SnapshotFiles> {
        let dir = data_dir.join("snapshots");
        if !dir.is_dir() {
            fs::create_dir_all(&dir)?;
            // The new directory's name, durable before a file in it is named in sled.
            super::sync_dir(data_dir)?;
        }
        Ok(SnapshotFiles {
            dir,
            temps: AtomicU64::new(0),
        })
    }

    /// The name of the file of a snapshot whose last entry is `index`: two snapshots
    /// up to the same entry hold the same state, so one may replace the other. Never a
    /// name a peer chose.
    pub(crate) fn name_for(index: u64) -> String {
        format!("snapshot-{index:020}.bin")
    }

    /// Writes `name`'s bytes through `encode` into a temporary file, not synced yet (see
    /// [`Written::sync`]). An encoder's own failure comes back as an `io::Error` of kind
    /// `Other`.
    pub(crate) fn write(
        &self,
        name: String,
        encode: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
    ) -> io::Result<Written> {
        let n = self.temps.fetch_add(1, Ordering::Relaxed);
        let temp = self.dir.join(format!("{name}.{n}.tmp"));
        let written = (|| {
            let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, File::create(&temp)?);
            encode(&mut out)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            let bytes = file.metadata()?.len();
            Ok(Written {
                temp: temp.clone(),
                file,
                name,
                bytes,
            })
        })();
        if written.is_err() {
            let _ = fs::remove_file(&temp);
        }
        written
    }

    /// Renames a written and synced file into place and syncs the directory, so that it
    /// survives a crash under its name.
    pub(crate) fn publish(&self, written: &Written) -> io::Result<()> {
        fs::rename(&written.temp, self.dir.join(&written.name))?;
        super::sync_dir(&self.dir)
    }

    /// The bytes of the file `name`.
    pub(crate) fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        fs::read(self.dir.join(name))
    }

    /// Removes every file but `keep` (none if `None`): replaced snapshots and files a
    /// crash left behind.
    pub(crate) fn remove_all_but(&self, keep: Option<&str>) -> io::Result<()> {
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            if keep.is_none_or(|k| entry.file_name() != k) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_published_file_is_whole_and_only_the_named_one_survives_a_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let files = SnapshotFiles::open(dir.path()).unwrap();
        let first = files
            .write(SnapshotFiles::name_for(7), |w| w.write_all(b"seven"))
            .unwrap();
        assert_eq!(first.bytes, 5);
        first.sync().unwrap();
        files.publish(&first).unwrap();
        assert_eq!(files.read(&first.name).unwrap(), b"seven");
        // An encoder that fails leaves nothing behind.
        let failed = files.write(SnapshotFiles::name_for(8), |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("broken"))
        });
        assert_eq!(failed.unwrap_err().to_string(), "broken");
        assert_eq!(
            fs::read_dir(dir.path().join("snapshots")).unwrap().count(),
            1
        );
        // A written file not yet published, and one published: the cleanup keeps the
        // one named.
        let orphan = files
            .write(SnapshotFiles::name_for(9), |w| w.write_all(b"nine"))
            .unwrap();
        let second = files
            .write(SnapshotFiles::name_for(10), |w| w.write_all(b"ten"))
            .unwrap();
        second.sync().unwrap();
        files.publish(&second).unwrap();
        files.remove_all_but(Some(&second.name)).unwrap();
        let left: Vec<_> = fs::read_dir(dir.path().join("snapshots"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, vec![second.name.clone()]);
        assert!(!orphan.temp.exists());
        assert_eq!(files.read(&second.name).unwrap(), b"ten");
        // Names sort by index and never come from a peer.
        assert_eq!(
            SnapshotFiles::name_for(10),
            "snapshot-00000000000000000010.bin"
        );
    }
}
