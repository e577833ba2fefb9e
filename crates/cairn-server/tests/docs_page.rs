//! The API reference page at `/docs`: public, embedded, same-origin only.

// Fixed, known-good inputs: a failed unwrap is a test failure.
#![allow(clippy::unwrap_used)]

mod common;
use common::*;

fn get_public(server: &Server, path: &str) -> Reply {
    cairn_testkit::http::call(server.addr, "GET", path, None, None)
}

#[test]
fn the_reference_page_is_served_with_its_assets() {
    let server = start(ServerConfig::default());
    let page = get_public(&server, "/docs");
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    let html = page.text();
    assert!(html.contains(r#"src="/docs/docs.js""#), "{html}");
    assert!(html.contains(r#"href="/docs/docs.css""#), "{html}");
    for (path, kind) in [
        ("/docs/docs.js", "text/javascript"),
        ("/docs/docs.css", "text/css"),
    ] {
        let asset = get_public(&server, path);
        assert_eq!(asset.status, 200, "{path}");
        assert!(
            asset.content_type.starts_with(kind),
            "{path}: {}",
            asset.content_type
        );
        assert!(!asset.body.is_empty(), "{path}");
    }
    // Nothing is fetched from another origin: the script asks this server
    // for its document, and names no other host.
    let script = get_public(&server, "/docs/docs.js").text();
    assert!(script.contains(r#"fetch("/openapi.json")"#));
    assert!(!script.contains("http://") && !script.contains("https://"));
    assert!(!script.contains("localStorage") && !script.contains("sessionStorage"));
    assert!(!html.contains("http://") && !html.contains("https://"));
}

#[test]
fn the_reference_page_forbids_other_origins() {
    let server = start(ServerConfig::default());
    let reply = cairn_testkit::http::call(server.addr, "GET", "/docs", None, None);
    assert_eq!(reply.status, 200);
    let raw = raw(server.addr, "GET /docs HTTP/1.1\r\nHost: localhost", b"");
    let policy = raw.header("content-security-policy").unwrap();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    assert_eq!(raw.header("x-content-type-options"), Some("nosniff"));
}
