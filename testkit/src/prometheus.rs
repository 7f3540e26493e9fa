//! Reading a Prometheus text exposition back, for the metrics' tests.

/// The value of the sample `name{labels}` in `text` (the labels as written, in order; empty
/// for a sample without labels), if present.
pub fn prometheus_sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let want = if labels.is_empty() {
        format!("{name} ")
    } else {
        format!("{name}{{{labels}}} ")
    };
    text.lines()
        .find_map(|l| l.strip_prefix(&want))
        .and_then(|v| v.trim().parse().ok())
}
