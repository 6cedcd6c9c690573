//! Tidy: the state machine stays pure. Its dependency tree (read from Cargo.lock) must not
//! reach tokio, sled or openraft, and its source must not name clocks, hashed collections
//! (iteration order would differ between nodes) or randomness.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const FORBIDDEN_CRATES: [&str; 4] = ["tokio", "sled", "openraft", "rand"];
const FORBIDDEN_SOURCE: [&str; 6] = [
    "std::time",
    "SystemTime",
    "Instant",
    "HashMap",
    "HashSet",
    "thread_rng",
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The crate's own `[dependencies]` (not dev-dependencies: tests may use what they like).
fn normal_dependencies() -> Vec<String> {
    let manifest = std::fs::read_to_string(crate_dir().join("Cargo.toml")).expect("Cargo.toml");
    let section = manifest
        .split("\n[dependencies]\n")
        .nth(1)
        .expect("a [dependencies] section");
    let section = section.split("\n[").next().unwrap_or_default();
    let deps: Vec<String> = section
        .lines()
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .map(str::to_string)
        .collect();
    assert!(!deps.is_empty(), "parsed the dependencies");
    deps
}

/// package name → its dependency names, from the workspace's Cargo.lock.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let lock = std::fs::read_to_string(crate_dir().join("../../Cargo.lock"))
        .expect("Cargo.lock at the workspace root");
    let mut graph = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let name = block
            .lines()
            .find_map(|l| l.strip_prefix("name = "))
            .map(|n| n.trim_matches('"').to_string())
            .expect("package name");
        let deps = match block.split_once("dependencies = [") {
            Some((_, rest)) => rest
                .split(']')
                .next()
                .unwrap_or_default()
                .split(',')
                .map(|d| d.trim().trim_matches('"'))
                .filter(|d| !d.is_empty())
                .map(|d| d.split(' ').next().unwrap_or(d).to_string())
                .collect(),
            None => Vec::new(),
        };
        graph.insert(name, deps);
    }
    graph
}

#[test]
fn state_machine_depends_on_no_runtime_storage_or_raft_crate() {
    let graph = lock_graph();
    let mut seen = BTreeSet::new();
    let mut stack = normal_dependencies();
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        stack.extend(graph.get(&name).cloned().unwrap_or_default());
    }
    assert!(
        seen.contains("serde"),
        "the walk found the crate's dependencies"
    );
    for forbidden in FORBIDDEN_CRATES {
        assert!(
            !seen.contains(forbidden),
            "baton-state-machine reaches {forbidden}"
        );
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn state_machine_source_names_no_clock_hash_map_or_randomness() {
    let mut files = Vec::new();
    rust_files(&crate_dir().join("src"), &mut files);
    assert!(files.len() > 10);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable source");
        for forbidden in FORBIDDEN_SOURCE {
            assert!(
                !text.contains(forbidden),
                "{} mentions {forbidden}",
                file.display()
            );
        }
    }
}
