//! The patch engine: parsing arbitrary text in both formats, applying it to
//! an arbitrary file, and the round trip of a diff between two files.
#![no_main]

use agentvfs_front::properties::{check_patch_apply, check_patch_parse, check_patch_round_trip};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, &str, &str, u8)| {
    let (patch, old, new, context) = input;
    check_patch_parse(patch);
    check_patch_apply(old, patch);
    check_patch_round_trip(old, new, context);
});
