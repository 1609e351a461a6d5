//! The actor macros' compile errors are part of the API: these tests pin their wording.
//! Regenerate the expected output with `TRYBUILD=overwrite cargo test --test macros_ui`
//! after a deliberate change, and review the diff.

#[test]
fn macros_accept_every_supported_handler_shape() {
    trybuild::TestCases::new().pass("ui/pass/*.rs");
}

#[test]
fn macros_reject_misuse_with_messages_that_say_what_to_do() {
    trybuild::TestCases::new().compile_fail("ui/fail/*.rs");
}
