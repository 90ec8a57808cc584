//! `SpacePath::parse` and `Reference::parse` on arbitrary text.
#![no_main]

use agentvfs_front::properties::{check_path_parse, check_reference_parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| {
    check_path_parse(input);
    check_reference_parse(input);
    // The URI form, with the rest of the input as its space and path.
    check_reference_parse(&format!("agentvfs://sp_01ARZ3NDEKTSV4RRFFQ69G5FAV/{input}"));
});
