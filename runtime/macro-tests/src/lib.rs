//! Nothing but a home for the macro tests in `tests/`: `macros_ui.rs` pins the compile
//! errors of `#[derive(Actor)]` and `#[messages]` (trybuild), `handler_shapes.rs` the
//! handler shapes they accept.
