//! A user's failure test for their own flow, written on the harness; the crate docs show it.

include!("../user_flow/lost_confirm.rs");
