//! Condition and event reasons: a [`Reason`] is a CamelCase word with where it appears and
//! what it means, so a user's table of reasons can be documented and checked. The kit's
//! conditions and events take nothing else. The few reasons the kit itself publishes are here.

use std::fmt;

/// Where a reason is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The reason of a status condition.
    Condition,
    /// The reason of an event.
    Event,
    /// Both (the condition and the event that reports it, or each on different objects).
    ConditionAndEvent,
}

impl Kind {
    /// "condition", "event" or "condition and event".
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Condition => "condition",
            Kind::Event => "event",
            Kind::ConditionAndEvent => "condition and event",
        }
    }
}

/// A condition or event reason: a CamelCase word, the objects it appears on and what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason {
    name: &'static str,
    kind: Kind,
    on: &'static str,
    meaning: &'static str,
}

impl Reason {
    /// A reason of a table: the kit's own (below) or its user's (the tests of the project
    /// check that reasons are made nowhere else).
    pub const fn new(name: &'static str, kind: Kind, on: &'static str, meaning: &'static str) -> Self {
        Self {
            name,
            kind,
            on,
            meaning,
        }
    }

    /// The reason as Kubernetes shows it (`kubectl describe`, `.status.conditions[].reason`).
    pub const fn name(self) -> &'static str {
        self.name
    }

    /// Whether it is a condition reason, an event reason or both.
    pub const fn kind(self) -> Kind {
        self.kind
    }

    /// The kinds of object it appears on.
    pub const fn on(self) -> &'static str {
        self.on
    }

    /// What it means, in one line.
    pub const fn meaning(self) -> &'static str {
        self.meaning
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl From<Reason> for String {
    fn from(r: Reason) -> String {
        r.name.to_string()
    }
}

impl PartialEq<Reason> for String {
    fn eq(&self, r: &Reason) -> bool {
        self == r.name
    }
}

impl PartialEq<Reason> for &str {
    fn eq(&self, r: &Reason) -> bool {
        *self == r.name
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, s: &&str) -> bool {
        self.name == *s
    }
}

/// Ready=False: the apiserver refused objects the controller applies; the message names each with the answer.
pub const APPLY_FAILED: Reason = Reason::new(
    "ApplyFailed",
    Kind::ConditionAndEvent,
    "the reconciled object",
    "Ready=False: the apiserver refused objects the controller applies; the message names each with the answer.",
);
/// Ready=False: an object the controller wants already exists and was made by someone else; it is not taken over.
pub const FOREIGN_OBJECT: Reason = Reason::new(
    "ForeignObject",
    Kind::Condition,
    "the reconciled object",
    "Ready=False: an object the controller wants already exists and was made by someone else; it is not taken over.",
);
/// Warning: the object's stored form does not fit the controller's schema (a field of the wrong type); it is ignored until fixed.
pub const UNDECODABLE: Reason = Reason::new(
    "Undecodable",
    Kind::Event,
    "a watched custom resource",
    "Warning: the object's stored form does not fit the controller's schema (a field of the wrong type); it is ignored until fixed.",
);
