//! What a frontend section is: a value compared whole, and how a change to it takes effect.
//! Each section's file implements [`Section`]; `frontend` lists the sections.

use std::fmt;

/// How a changed setting takes effect: the one answer `shuck check`, the reload's notes and
/// `running.toml` give, for global keys and sections alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// On reload (SIGHUP).
    Reload,
    /// Only on restart or upgrade; a reload leaves it as it runs.
    Restart,
}

/// How a change to one section of a frontend takes effect on reload (SIGHUP), with the reason
/// when a reload cannot apply it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    /// Connections accepted after the reload get the new value; open ones keep theirs.
    NewConnections,
    /// The reload keeps this section as it runs and says so, with the reason; a restart or an
    /// upgrade applies it.
    Restart(&'static str),
    /// The reload keeps the whole frontend as it runs and says so, with the reason.
    RestartFrontend(&'static str),
}

impl OnChange {
    pub fn applies(self) -> Applies {
        match self {
            OnChange::NewConnections => Applies::Reload,
            OnChange::Restart(_) | OnChange::RestartFrontend(_) => Applies::Restart,
        }
    }
}

/// One section of a frontend: a value compared whole, with the key naming it (in notes and
/// `running.toml`) and how a change to it applies.
pub trait Section: fmt::Debug + Clone + PartialEq + serde::Serialize {
    const KEY: &'static str;
    const ON_CHANGE: OnChange;
}

/// Sees each section of two frontends side by side (the running one and the new one).
pub trait SectionVisitor {
    fn visit<S: Section>(&mut self, old: &S, new: &mut S);
}
