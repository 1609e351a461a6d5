//! Shared pieces of the Lazarus miniapps.
