//! RBAC as data: every rule the project grants — to the operator (`run`), to the api-manager and
//! to the StorageOS components the operator renders — is a row in a Rust table, so the install
//! manifests, the rendered ClusterRoles and the tests all read one source.
//!
//! The operator creates ClusterRoles for its components. Kubernetes only lets it create a role
//! whose rules it holds itself (escalation prevention), so the operator's ClusterRole is its own
//! rules merged with every component rule ([`operator::cluster_role_rules`]). We chose that over
//! `escalate`/`bind` on the `storageos:*` roles: `escalate` on a role name lets its holder write
//! any rule (`*` included) into that role and bind it to itself, which is cluster-admin in two
//! steps; holding the union grants exactly what is handed out, and a rule removed from a
//! component also leaves the operator's role.

pub mod components;
pub mod operator;
pub mod trust;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

/// One RBAC rule, as a constant. Resource names are empty for "any object".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// API groups (`""` is the core group).
    pub groups: &'static [&'static str],
    /// Resources, subresources as `pods/log`.
    pub resources: &'static [&'static str],
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Object names the rule is limited to; empty: every object.
    pub names: &'static [&'static str],
}

/// A rule on every object of `resources`.
pub const fn rule(
    groups: &'static [&'static str],
    resources: &'static [&'static str],
    verbs: &'static [&'static str],
) -> Rule {
    Rule {
        groups,
        resources,
        verbs,
        names: &[],
    }
}

impl Rule {
    /// The same rule limited to the objects called `names`.
    pub const fn named(self, names: &'static [&'static str]) -> Rule {
        Rule { names, ..self }
    }

    /// The Kubernetes form.
    pub fn policy_rule(&self) -> PolicyRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(self.groups)),
            resources: Some(strings(self.resources)),
            verbs: strings(self.verbs),
            resource_names: (!self.names.is_empty()).then(|| strings(self.names)),
            non_resource_urls: None,
        }
    }
}

/// The Kubernetes form of a table.
pub fn policy_rules(rules: &[Rule]) -> Vec<PolicyRule> {
    rules.iter().map(Rule::policy_rule).collect()
}

/// One permission: a verb on a resource of a group, optionally on one named object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Permission {
    pub group: String,
    pub resource: String,
    pub verb: String,
    /// None: every object.
    pub name: Option<String>,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{} {}/{}", self.verb, group, self.resource)?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        Ok(())
    }
}

/// Every single permission a list of Kubernetes rules grants (non-resource URLs ignored).
pub fn permissions(rules: &[PolicyRule]) -> BTreeSet<Permission> {
    let mut out = BTreeSet::new();
    for r in rules {
        let names: Vec<Option<String>> = match r.resource_names.as_deref() {
            Some(names) if !names.is_empty() => names.iter().cloned().map(Some).collect(),
            _ => vec![None],
        };
        for group in r.api_groups.iter().flatten() {
            for resource in r.resources.iter().flatten() {
                for verb in &r.verbs {
                    for name in &names {
                        out.insert(Permission {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            name: name.clone(),
                        });
                    }
                }
            }
        }
    }
    out
}

/// What `needed` grants that `held` does not (a rule on every object covers a named one). Empty
/// means a holder of `held` may create a role with `needed` (no escalation).
pub fn missing(held: &[PolicyRule], needed: &[PolicyRule]) -> Vec<Permission> {
    let held = permissions(held);
    permissions(needed)
        .into_iter()
        .filter(|p| {
            !held.contains(p)
                && !held.contains(&Permission {
                    name: None,
                    ..p.clone()
                })
        })
        .collect()
}

/// Whether any rule uses `*` for a group, resource, verb or name.
pub fn has_wildcard(rules: &[PolicyRule]) -> bool {
    rules.iter().any(|r| {
        let any = |v: Option<&Vec<String>>| v.is_some_and(|v| v.iter().any(|s| s.contains('*')));
        any(r.api_groups.as_ref())
            || any(r.resources.as_ref())
            || any(Some(&r.verbs))
            || any(r.resource_names.as_ref())
            || any(r.non_resource_urls.as_ref())
    })
}

/// The union of several tables as few, sorted rules: permissions are grouped by (group, object
/// names), then resources that share the same verbs are listed together. Deterministic, so the
/// generated manifests are stable.
pub fn union(tables: &[&[Rule]]) -> Vec<PolicyRule> {
    let rules: Vec<PolicyRule> = tables.iter().flat_map(|t| policy_rules(t)).collect();
    // (group, name) → resource → verbs
    let mut by_scope: BTreeMap<(String, Option<String>), BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for p in permissions(&rules) {
        by_scope
            .entry((p.group, p.name))
            .or_default()
            .entry(p.resource)
            .or_default()
            .insert(p.verb);
    }
    // Named permissions already granted on every object are dropped.
    let unnamed: BTreeMap<(String, String), BTreeSet<String>> = by_scope
        .iter()
        .filter(|((_, name), _)| name.is_none())
        .flat_map(|((group, _), resources)| {
            resources
                .iter()
                .map(move |(resource, verbs)| ((group.clone(), resource.clone()), verbs.clone()))
        })
        .collect();
    let mut out = Vec::new();
    for ((group, name), resources) in by_scope {
        // verbs → resources
        let mut by_verbs: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
        for (resource, verbs) in resources {
            let verbs: Vec<String> = match &name {
                Some(_) => {
                    let broad = unnamed.get(&(group.clone(), resource.clone()));
                    verbs
                        .into_iter()
                        .filter(|v| !broad.is_some_and(|b| b.contains(v)))
                        .collect()
                }
                None => verbs.into_iter().collect(),
            };
            if !verbs.is_empty() {
                by_verbs.entry(verbs).or_default().push(resource);
            }
        }
        for (verbs, resources) in by_verbs {
            out.push(PolicyRule {
                api_groups: Some(vec![group.clone()]),
                resources: Some(resources),
                verbs,
                resource_names: name.clone().map(|n| vec![n]),
                non_resource_urls: None,
            });
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const A: &[Rule] = &[
        rule(&[""], &["pods", "secrets"], &["get", "list"]),
        rule(&["coordination.k8s.io"], &["leases"], &["get", "patch"]).named(&["lease-a"]),
    ];
    const B: &[Rule] = &[
        rule(&[""], &["pods"], &["delete", "get"]),
        rule(&["coordination.k8s.io"], &["leases"], &["get", "create"]),
    ];

    #[test]
    fn union_grants_exactly_what_the_tables_grant() {
        let u = union(&[A, B]);
        assert!(missing(&u, &policy_rules(A)).is_empty());
        assert!(missing(&u, &policy_rules(B)).is_empty());
        // Nothing more: every permission of the union comes from A or B.
        let both: Vec<PolicyRule> = policy_rules(A).into_iter().chain(policy_rules(B)).collect();
        assert!(missing(&both, &u).is_empty());
        // The named lease `get` is covered by the unnamed one and not listed twice.
        let named: Vec<_> = u.iter().filter(|r| r.resource_names.is_some()).collect();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].verbs, vec!["patch".to_string()]);
    }

    #[test]
    fn union_groups_resources_with_the_same_verbs() {
        let u = union(&[A]);
        let core: Vec<_> = u
            .iter()
            .filter(|r| r.api_groups.as_deref() == Some(&["".to_string()]))
            .collect();
        assert_eq!(core.len(), 1);
        assert_eq!(
            core[0].resources.as_deref().unwrap(),
            &["pods".to_string(), "secrets".to_string()]
        );
    }

    #[test]
    fn missing_names_each_permission_not_held() {
        let held = policy_rules(&[rule(&[""], &["pods"], &["get"])]);
        let needed = policy_rules(&[rule(&[""], &["pods"], &["get", "delete"])]);
        let m = missing(&held, &needed);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].to_string(), "delete core/pods");
    }

    #[test]
    fn wildcards_are_found_anywhere() {
        assert!(!has_wildcard(&policy_rules(A)));
        assert!(has_wildcard(&policy_rules(&[rule(&[""], &["pods"], &["*"])])));
        assert!(has_wildcard(&policy_rules(&[rule(&["*"], &["pods"], &["get"])])));
    }
}
