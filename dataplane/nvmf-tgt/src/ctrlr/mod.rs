//! The transport-neutral request and controller layer.

mod admin;
pub mod controller;
pub mod identify;
mod io;
pub mod log_page;
