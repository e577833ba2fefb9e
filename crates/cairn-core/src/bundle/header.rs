//! The header, the first line of a bundle (`docs/FORMAT.md` 10.1).

use super::{BUNDLE_VERSION, exact_members};
use crate::time::Timestamp;
use serde_json::{Value, json};

/// How a verdict's detail begins when the first line is a JSON object but
/// no bundle header (no `cairn_bundle` member, nor any member of a
/// bundle's lines): the wrong file was given, which a tool may word
/// otherwise than a tampered bundle.
pub const NOT_A_BUNDLE: &str = "not a cairn bundle";

/// Members of a bundle's lines (its header's, the checkpoint's, an
/// entry's, the selection's, a consistency line's, the end line's).
const BUNDLE_MEMBERS: [&str; 13] = [
    "server_name",
    "org_id",
    "origin",
    "server_key",
    "log_keys",
    "complete_log",
    "exported_at",
    "checkpoint",
    "seq",
    "selection",
    "consistency",
    "end",
    "proof",
];

/// The first line of a bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleHeader {
    /// The server key's name (the log origin is `<server_name>/<org_id>`).
    pub server_name: String,
    /// The org whose log the entries come from.
    pub org_id: String,
    /// The server's public key in vkey form (a convenience: verifiers
    /// should pin the operator's published key instead).
    pub server_key: String,
    /// The log's other keys (7.10), in vkey form; written when the log has
    /// more than one. As convenient, and as untrusted, as `server_key`.
    pub log_keys: Vec<String>,
    /// Whether the bundle holds the whole log up to the checkpoint.
    pub complete_log: bool,
    /// When the export was made (informative, not signed).
    pub exported_at: Timestamp,
}

impl BundleHeader {
    /// The header line (without newline).
    pub fn to_line(&self) -> String {
        let mut line = json!({
            "cairn_bundle": BUNDLE_VERSION,
            "server_name": self.server_name,
            "org_id": self.org_id,
            "origin": crate::log::log_origin(&self.server_name, &self.org_id),
            "server_key": self.server_key,
            "complete_log": self.complete_log,
            "exported_at": self.exported_at.to_string(),
        });
        if !self.log_keys.is_empty() {
            line["log_keys"] = json!(self.log_keys);
        }
        line.to_string()
    }

    /// Parses a header line, exactly.
    pub fn parse(line: &str) -> Result<BundleHeader, String> {
        let v = crate::json::from_str(line).map_err(|e| format!("header: {e}"))?;
        BundleHeader::from_value(&v)
    }

    pub(super) fn from_value(v: &Value) -> Result<BundleHeader, String> {
        let obj = v.as_object().ok_or("the header is not an object")?;
        match obj.get("cairn_bundle").and_then(Value::as_u64) {
            Some(BUNDLE_VERSION) => {}
            Some(1) => {
                return Err(
                    "this is a format 1 bundle (written by cairn 0.1); format 1 is not verifiable by this version, whose format is 2: export the log again with the current cairn".into(),
                );
            }
            Some(other) => {
                return Err(format!(
                    "bundle format {other} is not supported (this verifier reads format {BUNDLE_VERSION})"
                ));
            }
            // An object holding members of a bundle's lines (a header
            // whose marker was removed, a bundle missing its first line)
            // is a bundle that was tampered with or cut, not another file.
            None if BUNDLE_MEMBERS.iter().any(|m| obj.contains_key(*m)) => {
                return Err("the header lacks cairn_bundle".into());
            }
            None => return Err(format!("{NOT_A_BUNDLE}: the first line lacks cairn_bundle")),
        }
        let mut members = vec![
            "cairn_bundle",
            "server_name",
            "org_id",
            "origin",
            "server_key",
            "complete_log",
            "exported_at",
        ];
        if obj.contains_key("log_keys") {
            members.push("log_keys");
        }
        exact_members(obj, &members, "header")?;
        let log_keys = match obj.get("log_keys") {
            None => Vec::new(),
            Some(Value::Array(keys)) => keys
                .iter()
                .map(|k| {
                    k.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| "header.log_keys must be an array of strings".to_owned())
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err("header.log_keys must be an array of strings".into()),
        };
        let s = |k: &str| {
            obj[k]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("header.{k} must be a string"))
        };
        let header = BundleHeader {
            server_name: s("server_name")?,
            org_id: s("org_id")?,
            server_key: s("server_key")?,
            log_keys,
            complete_log: obj["complete_log"]
                .as_bool()
                .ok_or("header.complete_log must be a boolean")?,
            exported_at: Timestamp::parse_canonical(&s("exported_at")?)
                .map_err(|e| format!("header.exported_at: {e}"))?,
        };
        crate::record::validate_id("org_id", &header.org_id).map_err(|e| e.to_string())?;
        if s("origin")? != crate::log::log_origin(&header.server_name, &header.org_id) {
            return Err("header.origin is not server_name/org_id".into());
        }
        Ok(header)
    }
}
