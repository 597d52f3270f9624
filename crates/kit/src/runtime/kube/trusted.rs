//! The namespaces the operator trusts: StorageOSClusters, StorageOSUpgrades and Jobs are honoured
//! only there, and a cluster's Secret references and operand namespace may point only there.
//!
//! Creating any of those kinds is as powerful as being cluster-admin, and OLM aggregates create
//! rights on every CRD a bundle owns into the built-in `admin` and `edit` roles, so any namespace
//! editor could otherwise create them. The list is the operator's (the `run` flag
//! `--watch-namespaces`, env `WATCH_NAMESPACES`), never a CR's; by default it is the operator's
//! own namespace. `*` trusts every namespace: only for a cluster where every namespace editor is
//! a cluster administrator (and for tests).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// The namespace operands may always be rendered into: the Go operator's default, writable only
/// by cluster administrators.
pub const KUBE_SYSTEM: &str = "kube-system";

/// The trusted namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustedNamespaces {
    /// Every namespace (`*`).
    Any,
    /// Exactly these.
    Only(BTreeSet<String>),
}

/// Why a flag value is not a list of namespaces.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a list of namespaces: give comma-separated namespace names (lower-case letters, digits and '-'), \
     for example \"storageos-operator,default\", or \"*\" to trust every namespace"
)]
pub struct ParseError(String);

/// Whether `s` is a namespace name (an RFC 1123 label).
fn is_namespace_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl FromStr for TrustedNamespaces {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let entries: Vec<&str> = s.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        if entries == ["*"] {
            return Ok(Self::Any);
        }
        if entries.is_empty() || entries.iter().any(|e| !is_namespace_name(e)) {
            return Err(ParseError(s.to_string()));
        }
        Ok(Self::Only(entries.into_iter().map(String::from).collect()))
    }
}

impl fmt::Display for TrustedNamespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::Only(names) => f.write_str(&names.iter().cloned().collect::<Vec<_>>().join(",")),
        }
    }
}

/// Namespaces whose Secrets a StorageOSCluster may name besides its own and the trusted ones
/// (`--secret-namespaces`): the operator reads the named Secrets there and does nothing else, so
/// listing a namespace here gives its editors no say over the operator (unlike watching it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecretNamespaces(BTreeSet<String>);

impl FromStr for SecretNamespaces {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<TrustedNamespaces>()? {
            TrustedNamespaces::Only(names) => Ok(Self(names)),
            TrustedNamespaces::Any => Err(ParseError(s.to_string())),
        }
    }
}

impl fmt::Display for SecretNamespaces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.iter().cloned().collect::<Vec<_>>().join(","))
    }
}

impl SecretNamespaces {
    /// Whether Secrets in `namespace` may be named.
    pub fn contains(&self, namespace: &str) -> bool {
        self.0.contains(namespace)
    }
}

impl TrustedNamespaces {
    /// Only `namespace` (the default: the operator's own namespace).
    pub fn only(namespace: impl Into<String>) -> Self {
        Self::Only(BTreeSet::from([namespace.into()]))
    }

    /// Whether objects in `namespace` are honoured.
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Only(names) => names.contains(namespace),
        }
    }

    /// Whether a cluster in `cr_namespace` may read a Secret from `namespace`: its own namespace
    /// or a trusted one.
    pub fn allows_secret_ref(&self, cr_namespace: &str, namespace: &str) -> bool {
        namespace == cr_namespace || self.allows(namespace)
    }

    /// Whether a cluster in `cr_namespace` may render its operands (privileged pods and the
    /// ServiceAccounts the cluster-wide roles are bound to) into `namespace`: its own namespace,
    /// a trusted one, or `kube-system`.
    pub fn allows_operand_namespace(&self, cr_namespace: &str, namespace: &str) -> bool {
        namespace == KUBE_SYSTEM || self.allows_secret_ref(cr_namespace, namespace)
    }

    /// Every `K` in the trusted namespaces, read one namespace at a time (every namespace only
    /// for `*`): objects elsewhere are never read, however many or large they are. `Err` if any
    /// read fails: the caller must not act on a partial list.
    pub async fn list<K>(&self, client: &kube::Client) -> Result<Vec<K>, kube::Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + fmt::Debug,
    {
        let params = kube::api::ListParams::default();
        match self {
            Self::Any => Ok(kube::Api::<K>::all(client.clone()).list(&params).await?.items),
            Self::Only(names) => {
                let mut all = Vec::new();
                for ns in names {
                    all.extend(
                        kube::Api::<K>::namespaced(client.clone(), ns)
                            .list(&params)
                            .await?
                            .items,
                    );
                }
                Ok(all)
            }
        }
    }

    /// The Ready=False message of a `kind` in `namespace`, which is not trusted.
    pub fn refusal(&self, kind: &str, namespace: &str) -> String {
        format!(
            "namespace {namespace:?} is not trusted by the operator (it honours {kind}s only in: {self}); \
             create it in a trusted namespace, or ask the operator's administrator to add {namespace:?} \
             to --watch-namespaces (env WATCH_NAMESPACES) if every editor of that namespace may act as \
             cluster-admin"
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_namespaces_are_trusted() {
        let t: TrustedNamespaces = " storageos-operator , default ".parse().unwrap();
        assert!(t.allows("storageos-operator") && t.allows("default"));
        assert!(!t.allows("tenant") && !t.allows("kube-system") && !t.allows(""));
        assert_eq!(t.to_string(), "default,storageos-operator");
        assert_eq!(TrustedNamespaces::only("ops"), "ops".parse().unwrap());
    }

    #[test]
    fn a_star_trusts_every_namespace_and_bad_lists_are_refused() {
        let any: TrustedNamespaces = "*".parse().unwrap();
        assert!(any.allows("tenant"));
        for bad in ["", " , ", "Default", "a,*", "-a", "a_b", "ns/x", &"a".repeat(64)] {
            assert!(bad.parse::<TrustedNamespaces>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn secret_refs_stay_in_the_cr_namespace_or_trusted_ones() {
        let t = TrustedNamespaces::only("storageos-operator");
        assert!(t.allows_secret_ref("storageos-operator", "storageos-operator"));
        assert!(!t.allows_secret_ref("storageos-operator", "kube-system"));
        assert!(!t.allows_secret_ref("storageos-operator", "tenant"));
        assert!(t.allows_operand_namespace("storageos-operator", "kube-system"));
        assert!(!t.allows_operand_namespace("storageos-operator", "tenant"));
        let m = t.refusal("StorageOSCluster", "tenant");
        assert!(m.contains("\"tenant\"") && m.contains("WATCH_NAMESPACES"), "{m}");
    }
}
