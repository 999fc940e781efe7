//! An operator's say over single backends (`shuck ctl backend drain|disable|enable|weight`): a
//! drained backend gets no new connection while its open ones carry on; a disabled one neither,
//! and its open connections are closed after `shutdown_grace`; a weight replaces the
//! configured one. Read when a pool is built (at start, on reload, on a DNS change, and after
//! each command, which has the workers rebuild their pools), never per connection. Kept across
//! reloads for as long as the backend is configured; written to `backend-states.json` in
//! `state_dir` when there is one, and read from it at start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};

use crate::config::BackendAddr;

/// What an operator set for a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdminState {
    /// Serving as configured.
    #[default]
    Enabled,
    /// No new connections; open ones finish.
    Drain,
    /// No new connections; open ones closed after `shutdown_grace`.
    Disabled,
}

impl AdminState {
    /// As `shuck_backend_admin_state` says it.
    pub(crate) fn gauge(self) -> i64 {
        match self {
            AdminState::Enabled => 0,
            AdminState::Drain => 1,
            AdminState::Disabled => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Enabled => "enabled",
            AdminState::Drain => "drain",
            AdminState::Disabled => "disabled",
        }
    }
}

/// One backend's settings by the operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// `None`: as its host name's setting says (or enabled). An address's own `enabled` is
    /// kept while its host name is drained or disabled: the more specific one wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<AdminState>,
    /// Replaces the configured weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Which change made it (counted per process, not kept): a disabled backend's delayed close
    /// checks that no later change came first.
    #[serde(skip)]
    pub(crate) change: u64,
}

impl Setting {
    /// The state it says, enabled when it says none.
    pub fn state(&self) -> AdminState {
        self.state.unwrap_or_default()
    }
}

/// A backend as commands name it: frontend, route (`default`: the frontend's own backends),
/// and the backend as the configuration writes it (a host name stands for each of its
/// addresses; `name@address` for one of them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub(crate) struct MemberKey {
    pub(crate) frontend: String,
    pub(crate) route: String,
    pub(crate) backend: String,
}

impl MemberKey {
    /// The host name's key, for a key naming one of its addresses (`name@address`).
    fn broader(&self) -> Option<MemberKey> {
        let (name, _) = self.backend.split_once('@')?;
        Some(MemberKey {
            backend: name.to_string(),
            ..self.clone()
        })
    }

    /// Whether this key names `member` (a pool's member: an address, or `name@address`).
    fn names(&self, frontend: &str, route: &str, member: &str) -> bool {
        self.frontend == frontend
            && self.route == route
            && super::dns::stands_for(&self.backend, member)
    }
}

/// Whether `c` still configures `key`'s backend: its frontend, its route (`default`: the
/// frontend's own backends) and the backend as written (or one address of it, `name@address`).
pub(crate) fn configured(c: &crate::config::Config, key: &MemberKey) -> bool {
    let Some(fe) = c.frontends.iter().find(|f| f.name == key.frontend) else {
        return false;
    };
    let backends = if key.route == "default" {
        Some(&fe.backend)
    } else {
        fe.route
            .0
            .iter()
            .find(|r| r.name == key.route)
            .map(|r| &r.backend)
    };
    let Some(crate::config::Backend::Servers(list)) = backends.map(|b| &b.target) else {
        return false;
    };
    let name = key
        .backend
        .split_once('@')
        .map_or(key.backend.as_str(), |(n, _)| n);
    list.iter().any(|b| b.name == name || b.name == key.backend)
}

/// The file in `state_dir`.
const FILE: &str = "backend-states.json";

/// Every setting in the process, by backend.
#[derive(Debug, Default)]
pub(crate) struct AdminStates {
    /// The settings, and the number of the last change.
    settings: Mutex<(BTreeMap<MemberKey, Setting>, u64)>,
    /// Where they are kept across restarts, if anywhere.
    file: Mutex<Option<PathBuf>>,
}

/// A member of a pool as the operator left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) state: AdminState,
    pub(crate) weight: u32,
}

impl AdminStates {
    fn locked(&self) -> MutexGuard<'_, (BTreeMap<MemberKey, Setting>, u64)> {
        self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads what an earlier process left in `state_dir` (a missing file: nothing set; a bad
    /// one: said, and nothing set); later changes are written there.
    pub(crate) fn keep_in(&self, state_dir: &Path) {
        let path = state_dir.join(FILE);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<Vec<(MemberKey, Setting)>>(&bytes) {
                Ok(list) => self.locked().0 = list.into_iter().collect(),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "backend states not read: every backend starts enabled");
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "backend states not read: every backend starts enabled");
            }
        }
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = Some(path);
    }

    /// Sets `key`'s state, its weight, or both; the setting before and after.
    pub(crate) fn set(
        &self,
        key: MemberKey,
        state: Option<AdminState>,
        weight: Option<u32>,
    ) -> (Setting, Setting) {
        let mut guard = self.locked();
        let (all, changes) = &mut *guard;
        *changes += 1;
        let before = all.get(&key).copied().unwrap_or_default();
        let mut now = before;
        now.change = *changes;
        if let Some(s) = state {
            // Enabled is kept only where it overrides the host name's setting.
            let overrides = key
                .broader()
                .and_then(|b| all.get(&b))
                .is_some_and(|b| b.state() != AdminState::Enabled);
            now.state = (s != AdminState::Enabled || overrides).then_some(s);
        }
        if weight.is_some() {
            now.weight = weight;
        }
        if now.state.is_none() && now.weight.is_none() {
            all.remove(&key);
        } else {
            all.insert(key, now);
        }
        // Under the lock: two changes at once are written in their order.
        self.save(all);
        (before, now)
    }

    /// Forgets the settings of backends `configured` no longer names (a reload removed them):
    /// one added back later starts enabled. The keys forgotten.
    pub(crate) fn keep_configured(
        &self,
        configured: impl Fn(&MemberKey) -> bool,
    ) -> Vec<MemberKey> {
        let mut guard = self.locked();
        let gone: Vec<MemberKey> = guard.0.keys().filter(|k| !configured(k)).cloned().collect();
        if !gone.is_empty() {
            guard.0.retain(|k, _| configured(k));
            self.save(&guard.0);
        }
        gone
    }

    fn save(&self, all: &BTreeMap<MemberKey, Setting>) {
        let Some(path) = self
            .file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        let list: Vec<(&MemberKey, &Setting)> = all.iter().collect();
        let written = serde_json::to_vec_pretty(&list)
            .map_err(std::io::Error::other)
            .and_then(|bytes| crate::sys::state_files::write_private(&path, &bytes));
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "backend states not saved: a restart starts every backend enabled");
        }
    }

    /// Every setting now.
    pub(crate) fn all(&self) -> Vec<(MemberKey, Setting)> {
        self.locked()
            .0
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// `key`'s setting now.
    pub(crate) fn get(&self, key: &MemberKey) -> Setting {
        self.locked().0.get(key).copied().unwrap_or_default()
    }

    /// How the operator left each of `members` of `frontend`'s `route`: the most specific
    /// setting (`name@address` over `name`) wins.
    pub(crate) fn applied(
        &self,
        frontend: &str,
        route: &str,
        members: &[BackendAddr],
    ) -> Vec<Applied> {
        let guard = self.locked();
        let all = &guard.0;
        members
            .iter()
            .map(|m| {
                let mut found: Vec<(&MemberKey, &Setting)> = all
                    .iter()
                    .filter(|(k, _)| k.names(frontend, route, &m.name))
                    .collect();
                // The exact name last: it wins.
                found.sort_by_key(|(k, _)| k.backend == m.name);
                let mut applied = Applied {
                    state: AdminState::Enabled,
                    weight: m.weight,
                };
                for (_, s) in found {
                    if let Some(state) = s.state {
                        applied.state = state;
                    }
                    if let Some(w) = s.weight {
                        applied.weight = w;
                    }
                }
                applied
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Target;

    fn member(name: &str) -> BackendAddr {
        BackendAddr {
            name: name.into(),
            addr: Target::Tcp(([127, 0, 0, 1], 1).into()),
            weight: 3,
        }
    }

    fn key(backend: &str) -> MemberKey {
        MemberKey {
            frontend: "web".into(),
            route: "default".into(),
            backend: backend.into(),
        }
    }

    #[test]
    fn a_host_name_stands_for_its_addresses_and_an_address_setting_wins() {
        let s = AdminStates::default();
        s.set(key("api:80"), Some(AdminState::Drain), Some(5));
        s.set(key("api:80@10.0.0.2"), Some(AdminState::Disabled), None);
        // One address brought back while its host name stays drained.
        s.set(key("api:80@10.0.0.3"), Some(AdminState::Enabled), None);
        let got = s.applied(
            "web",
            "default",
            &[
                member("api:80@10.0.0.1"),
                member("api:80@10.0.0.2"),
                member("api:80@10.0.0.3"),
                member("api:8080"),
            ],
        );
        let states: Vec<(AdminState, u32)> = got.iter().map(|a| (a.state, a.weight)).collect();
        assert_eq!(
            states,
            [
                (AdminState::Drain, 5),
                (AdminState::Disabled, 5),
                (AdminState::Enabled, 5),
                (AdminState::Enabled, 3)
            ]
        );
        // Another route's backend of the same name is not touched.
        let other = s.applied("web", "api", &[member("api:80@10.0.0.1")]);
        assert_eq!(other[0].state, AdminState::Enabled);
    }

    #[test]
    fn enabled_with_no_weight_is_forgotten_and_states_survive_a_restart() {
        let dir = tempfile::tempdir().expect("dir");
        // As a state directory is (it holds keys): the file is refused in one others may enter.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        let s = AdminStates::default();
        s.keep_in(dir.path());
        s.set(key("a:1"), Some(AdminState::Drain), None);
        s.set(key("b:1"), None, Some(7));
        let (before, _) = s.set(key("a:1"), Some(AdminState::Enabled), None);
        assert_eq!(before.state, Some(AdminState::Drain));
        let restarted = AdminStates::default();
        restarted.keep_in(dir.path());
        let kept = |s: &AdminStates| -> Vec<(MemberKey, Option<AdminState>, Option<u32>)> {
            s.all()
                .into_iter()
                .map(|(k, v)| (k, v.state, v.weight))
                .collect()
        };
        assert_eq!(kept(&restarted), kept(&s));
        assert_eq!(kept(&restarted), [(key("b:1"), None, Some(7))]);
        // A backend no longer configured is forgotten, in the file too.
        assert_eq!(
            restarted.keep_configured(|k| k.backend != "b:1"),
            [key("b:1")]
        );
        let again = AdminStates::default();
        again.keep_in(dir.path());
        assert!(again.all().is_empty());
    }
}
