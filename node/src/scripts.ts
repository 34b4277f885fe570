/**
 * The script backend's Lua texts (Redisson's `RLock` layout, shared with the Rust and Python
 * clients): `scripts.json` is the output of `cargo run -q -p dlock-client --example
 * export_scripts`, embedded at build time (see scripts/build.mjs).
 */
import { createHash } from 'node:crypto';
import { SCRIPTS } from './scripts.generated.js';

export type ScriptName =
  | 'lock'
  | 'unlock'
  | 'renew'
  | 'force_unlock'
  | 'rw_lock'
  | 'rw_unlock'
  | 'rw_renew'
  | 'sem_acquire'
  | 'sem_release'
  | 'sem_renew';

export const UNLOCK_MESSAGE: string = SCRIPTS.unlock_message;
export const DEFAULT_CHANNEL_PREFIX: string = SCRIPTS.default_channel_prefix;

const shas = new Map<ScriptName, string>();

export function scriptText(name: ScriptName): string {
  return SCRIPTS[name];
}

export function scriptSha(name: ScriptName): string {
  let sha = shas.get(name);
  if (!sha) shas.set(name, (sha = createHash('sha1').update(SCRIPTS[name]).digest('hex')));
  return sha;
}

/**
 * The unlock channel of `key`: `<prefix>:{key}`, or `<prefix>:key` when the key already has
 * a `{` (a hash tag), so the channel hashes to the key's slot. The rule is dlock-core's
 * (`names::unlock_channel`); the module publishes on the same name.
 */
export function channelName(prefix: string, key: string): string {
  return key.includes('{') ? `${prefix}:${key}` : `${prefix}:{${key}}`;
}
