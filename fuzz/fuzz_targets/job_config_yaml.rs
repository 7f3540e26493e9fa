//! The core's job configuration YAML (ElasticJob's `config` node, and a file of jobs): any
//! input is a configuration or a list of problems, never a panic; and a configuration read
//! back from its own YAML is the same configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardjob_core::JobConfig;
use shardjob_core::config::{KnownTypes, Strictness, parse_jobs_file};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for strictness in [Strictness::Strict, Strictness::Lenient] {
        if let Ok(config) = JobConfig::from_yaml(text, strictness) {
            let yaml = config.to_yaml();
            match JobConfig::from_yaml(&yaml, Strictness::Strict) {
                Ok(again) => assert_eq!(again, config, "read back differently:\n{yaml}"),
                Err(e) => panic!("its own YAML is refused: {e}\n{yaml}"),
            }
        }
        let _ = parse_jobs_file(text, strictness, &KnownTypes::default());
    }
});
