//! Helpers the simulator's test files share (each test file is its own crate: they include
//! this module by path).

/// The options of shardjob instance `id`, with the planted bug named `plant` switched on (a
/// name the `plant` feature compiles in; without the feature a name is a mistake of the test).
pub fn options(id: &str, plant: Option<&str>) -> shardjob_core::machine::MachineOptions {
    #[cfg_attr(not(feature = "plant"), allow(unused_mut))]
    let mut opts = shardjob_core::machine::MachineOptions::new(id.parse().unwrap());
    if let Some(name) = plant {
        #[cfg(feature = "plant")]
        opts.plants.insert(name.parse().unwrap());
        #[cfg(not(feature = "plant"))]
        panic!("planted bug {name} needs the `plant` feature");
    }
    opts
}
