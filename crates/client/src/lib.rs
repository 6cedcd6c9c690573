//! Rust client library for baton: leases, lock guards with fences, watches. Built by a later issue.
