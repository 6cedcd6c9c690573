//! Raft node: the state machine replicated by openraft over sled. Built by a later issue.
