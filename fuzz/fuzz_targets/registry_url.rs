//! Registry URLs (`mem://`, `zk://user:password@host:port,.../namespace?session_timeout_ms=N`,
//! `etcd://...`): any input is a URL or an error, never a panic; and a URL's text (the
//! password masked) reads back as the same URL but for the password.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shardjob::registry_url::RegistryUrl;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match RegistryUrl::parse(text) {
        Ok(url) => {
            let shown = url.to_string();
            let _ = url.address();
            let _ = url.session_timeout();
            match RegistryUrl::parse(&shown) {
                // Debug masks the password too: everything else must agree.
                Ok(again) => assert_eq!(format!("{again:?}"), format!("{url:?}"), "{shown}"),
                Err(e) => panic!("its own text {shown:?} is refused: {e}"),
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
