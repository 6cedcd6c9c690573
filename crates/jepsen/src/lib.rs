//! Jepsen-style harness: real processes, faults, histories, checkers. Built by a later issue.
