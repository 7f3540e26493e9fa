//! The job files of `shardjob run` and `shardjob config check` (a list of jobs, or Spring
//! Boot's `application.yml`): any input is jobs or notes, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match shardjob_cli::jobfile::load(text) {
        Ok(file) => {
            for job in &file.jobs {
                let _ = job.config.to_yaml();
            }
        }
        Err(notes) => {
            for note in notes {
                let _ = note.to_string();
            }
        }
    }
});
