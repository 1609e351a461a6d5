//! The actor macros' compile errors are part of the API: these tests pin their wording.
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test -p lazarus-macro-tests --test macros_ui`
//! after a deliberate change, and review the diff. The shapes the macros accept are
//! `handler_shapes.rs`, an ordinary test.

#[test]
fn macros_reject_misuse_with_messages_that_say_what_to_do() {
    trybuild::TestCases::new().compile_fail("tests/ui/fail/*.rs");
}
