//! The styles this process knows by name: the built-ins, and each style handed to [`register`].
//! A run folder names its style, so reading it back (its manifest, its checkpoint's
//! `config.json`) looks the name up here, as typetag does for serde trait objects.

use std::sync::{OnceLock, RwLock};

use super::{Style, TowerStyle};
use crate::{Result, TowersError};

/// The built-in styles: adding one to lmsplit is its file in `style/` and one line here.
fn builtins() -> Vec<Style> {
    vec![Style::elmo(), Style::gpt(), Style::bert()]
}

fn table() -> &'static RwLock<Vec<Style>> {
    static TABLE: OnceLock<RwLock<Vec<Style>>> = OnceLock::new();
    TABLE.get_or_init(|| RwLock::new(builtins()))
}

/// Makes `style` known by its name in this process (so that runs, checkpoints and manifests
/// naming it can be read back) and returns its handle. Registering the same type again is
/// harmless; another type under a name already taken is a [`TowersError::Config`].
pub fn register<S: TowerStyle>(style: S) -> Result<Style> {
    let new = Style::of(style);
    let mut t = table().write().unwrap_or_else(|p| p.into_inner());
    if let Some(old) = t.iter().find(|s| s.name().eq_ignore_ascii_case(new.name())) {
        return match old.erased().style_type() == new.erased().style_type() {
            true => Ok(old.clone()),
            false => Err(TowersError::Config(format!(
                "another tower style is registered as {:?} already: give yours another name",
                new.name()
            ))),
        };
    }
    t.push(new.clone());
    Ok(new)
}

/// Every registered style: the built-ins first, then the registered ones in order.
pub fn registered() -> Vec<Style> {
    table().read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The registered style named `name` (case-insensitive).
pub(crate) fn lookup(name: &str) -> Result<Style> {
    let all = registered();
    if let Some(s) = all.iter().find(|s| s.name().eq_ignore_ascii_case(name)) {
        return Ok(s.clone());
    }
    let names: Vec<&str> = all.iter().map(|s| s.name()).collect();
    Err(TowersError::Config(format!(
        "unknown tower style {name:?} (registered: {}); a style of your own is registered \
         with towers::register(YourStyle) before its runs are read",
        names.join(", ")
    )))
}
