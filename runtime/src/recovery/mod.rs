//! Rollback recovery (in progress): the sans-IO protocol core.
