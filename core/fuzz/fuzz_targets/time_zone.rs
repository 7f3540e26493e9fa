//! Fuzzes `JobTimeZone::parse`: it never panics, and what it accepts displays as a name that
//! parses to the same zone.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardjob_core::JobTimeZone;

fuzz_target!(|text: &str| {
    if let Ok(tz) = JobTimeZone::parse(text) {
        assert_eq!(JobTimeZone::parse(&tz.to_string()).as_ref(), Ok(&tz));
    }
});
