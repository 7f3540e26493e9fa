//! The page's style sheet, script and icon, built into the binary.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

const CSS: &str = include_str!("../assets/console.css");
const JS: &str = include_str!("../assets/console.js");
const ICON: &[u8] = include_bytes!("../assets/favicon.svg");

/// `GET /assets/{file}`.
pub async fn serve(Path(file): Path<String>) -> Response {
    let (kind, body): (&str, &[u8]) = match file.as_str() {
        "console.css" => ("text/css; charset=utf-8", CSS.as_bytes()),
        "console.js" => ("text/javascript; charset=utf-8", JS.as_bytes()),
        "favicon.svg" => ("image/svg+xml", ICON),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}
