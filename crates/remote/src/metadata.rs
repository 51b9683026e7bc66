//! `RequestMetadata`, the header every REAPI call carries so a server can tell who asks and
//! what for (as Bazel sends it): the tool (`nxcc` or `nxcc worker`, and its version), the action
//! the call is about, an id of this compile (`tool_invocation_id`), and an id shared by every
//! compile of one run (`correlated_invocations_id`: one per process — a `parallel-compile` run,
//! a daemon — or `NXCC_REMOTE_INVOCATION_ID` when a caller sets it for several processes).

use std::sync::OnceLock;

use prost::Message;
use tonic::metadata::BinaryMetadataValue;

use super::re;

/// The header's name (binary metadata: the encoded message).
pub const HEADER: &str = "build.bazel.remote.execution.v2.requestmetadata-bin";

/// What one compile's calls say about themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// `nxcc`, or `nxcc worker` for a worker's calls.
    pub tool: String,
    /// This compile (or lease).
    pub invocation: String,
    /// The run this compile belongs to.
    pub correlated: String,
    /// The action's digest hash, once known.
    pub action_id: String,
}

impl Metadata {
    /// A new compile of `tool`: a fresh invocation id, correlated with `correlated` (or with
    /// this process's run).
    pub fn new(tool: &str, correlated: Option<&str>) -> Metadata {
        Metadata {
            tool: tool.to_string(),
            invocation: uuid(),
            correlated: correlated
                .map(str::to_string)
                .unwrap_or_else(|| process_invocation().to_string()),
            action_id: String::new(),
        }
    }

    /// The same compile, about `action`.
    pub fn for_action(mut self, action: &re::Digest) -> Metadata {
        self.action_id = action.hash.clone();
        self
    }

    /// The message.
    pub fn message(&self) -> re::RequestMetadata {
        re::RequestMetadata {
            tool_details: Some(re::ToolDetails {
                tool_name: self.tool.clone(),
                tool_version: crate::VERSION.to_string(),
            }),
            action_id: self.action_id.clone(),
            tool_invocation_id: self.invocation.clone(),
            correlated_invocations_id: self.correlated.clone(),
            action_mnemonic: "NeuronCompile".to_string(),
            target_id: String::new(),
            configuration_id: String::new(),
        }
    }

    /// The header's value.
    pub fn encode(&self) -> BinaryMetadataValue {
        BinaryMetadataValue::from_bytes(&self.message().encode_to_vec())
    }
}

/// This process's run id: made once, shared by every compile it makes.
pub fn process_invocation() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(uuid)
}

/// A random-looking version-4 UUID (its bits from a hash of the host, the process, the time and
/// a sequence: no two calls anywhere give the same one by more than chance).
pub fn uuid() -> String {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let seed = format!("{host}\0{}\0{nanos}", crate::fsx::unique::name(""));
    let h = blake3::hash(seed.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&h.as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    crate::neff::header::format_uuid(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_version_4_and_differ() {
        let a = uuid();
        let b = uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn compiles_of_one_run_share_the_correlated_id() {
        let d = re::Digest {
            hash: "ab".repeat(32),
            size_bytes: 10,
        };
        let one = Metadata::new("nxcc", None).for_action(&d);
        let two = Metadata::new("nxcc", None);
        assert_eq!(one.correlated, two.correlated);
        assert_ne!(one.invocation, two.invocation);
        let m = re::RequestMetadata::decode(one.encode().to_bytes().unwrap().as_ref()).unwrap();
        assert_eq!(m.action_id, d.hash);
        assert_eq!(m.tool_details.unwrap().tool_name, "nxcc");
        assert_eq!(Metadata::new("nxcc", Some("run-7")).correlated, "run-7");
    }
}
