//! Module arguments: `loadmodule libdlock.so [name value ...]`, parsed into a [`Config`].

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Prefix of Redisson's unlock channel.
    pub channel_prefix: String,
    /// When to publish `0` on the unlock channel as a release frees a lock nobody waits for.
    pub publish: Publish,
    /// Most clients queued on one key; 0 = no limit.
    pub max_waiters_per_key: usize,
    /// Most clients queued in total; 0 = no limit.
    pub max_waiters: usize,
    /// Whether Redisson's lock scripts (`EVAL`/`EVALSHA`) are served natively.
    pub redisson: Redisson,
}

/// The `redisson` module argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redisson {
    /// `native` (the default): a command filter recognises Redisson's lock scripts by their
    /// SHA1 and runs the module's implementation of each instead of the Lua.
    Native,
    /// `lua`: no command filter at all; the scripts run as Lua.
    Lua,
}

/// The `publish` module argument: when a release that frees a lock publishes Redisson's unlock
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// `yes`: on every such release.
    Always,
    /// `no`: never.
    Never,
    /// `auto` (the default): where a subscriber may hear it. On a standalone server without
    /// replicas, only while the server has subscribers (checked every 100 ms, and a message
    /// held back meanwhile is sent late when one appears); in cluster mode or with replicas,
    /// always (their subscribers cannot be counted here).
    Auto,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            channel_prefix: crate::names::DEFAULT_CHANNEL_PREFIX.into(),
            publish: Publish::Auto,
            max_waiters_per_key: 1_000,
            max_waiters: 10_000,
            redisson: Redisson::Native,
        }
    }
}

fn count(name: &str, value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .map_err(|_| format!("{name} must be a non-negative integer, got '{value}'"))
}

impl Config {
    /// Parses `name value` pairs (names case-insensitive). The error is the log line.
    pub fn parse(args: &[String]) -> Result<Config, String> {
        if !args.len().is_multiple_of(2) {
            return Err(format!(
                "module argument '{}' has no value (arguments come in 'name value' pairs)",
                args[args.len() - 1]
            ));
        }
        let mut c = Config::default();
        for pair in args.chunks(2) {
            let (name, value) = (pair[0].to_ascii_lowercase(), pair[1].as_str());
            match name.as_str() {
                "channel-prefix" if !value.is_empty() => c.channel_prefix = value.to_string(),
                "channel-prefix" => return Err("channel-prefix must not be empty".into()),
                "publish" => {
                    c.publish = match value.to_ascii_lowercase().as_str() {
                        "yes" => Publish::Always,
                        "no" => Publish::Never,
                        "auto" => Publish::Auto,
                        _ => {
                            return Err(format!("publish must be yes, no or auto, got '{value}'"))
                        }
                    }
                }
                "max-waiters-per-key" => c.max_waiters_per_key = count(&name, value)?,
                "max-waiters" => c.max_waiters = count(&name, value)?,
                "redisson" => {
                    c.redisson = match value.to_ascii_lowercase().as_str() {
                        "native" => Redisson::Native,
                        "lua" => Redisson::Lua,
                        _ => return Err(format!("redisson must be native or lua, got '{value}'")),
                    }
                }
                _ => return Err(format!(
                    "unknown module argument '{}' (known: channel-prefix, publish, max-waiters-per-key, max-waiters, redisson)",
                    pair[0]
                )),
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(words: &[&str]) -> Result<Config, String> {
        Config::parse(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(p(&[]).unwrap(), Config::default());
        let c = p(&["publish", "NO", "MAX-WAITERS", "0", "channel-prefix", "x"]).unwrap();
        assert_eq!(c.publish, Publish::Never);
        assert_eq!(p(&["publish", "Yes"]).unwrap().publish, Publish::Always);
        assert_eq!(p(&["publish", "auto"]).unwrap().publish, Publish::Auto);
        assert_eq!((c.max_waiters, c.channel_prefix.as_str()), (0, "x"));
        assert_eq!(p(&["redisson", "LUA"]).unwrap().redisson, Redisson::Lua);
        assert_eq!(p(&[]).unwrap().redisson, Redisson::Native);
        assert!(p(&["redisson", "maybe"])
            .unwrap_err()
            .contains("native or lua"));
    }

    #[test]
    fn bad_arguments_are_explained() {
        assert!(p(&["publish"])
            .unwrap_err()
            .contains("'publish' has no value"));
        assert!(p(&["publish", "maybe"])
            .unwrap_err()
            .contains("yes, no or auto"));
        assert!(p(&["max-waiters", "-1"])
            .unwrap_err()
            .contains("max-waiters"));
        assert!(p(&["colour", "red"])
            .unwrap_err()
            .contains("unknown module argument 'colour'"));
    }
}
