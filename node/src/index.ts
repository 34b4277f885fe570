export { Client, Lock, ReadWriteLock, Semaphore } from './client.js';
export type { ClientOptions, LockOptions, AcquireOptions, SemaphoreOptions, SemaphoreAcquireOptions } from './client.js';
export { Held } from './hold.js';
export type { Kind, LockInfo, Holder, Waiter } from './protocol.js';
export {
  DlockError,
  ModuleNotLoadedError,
  ServerConnectionError,
  WrongTypeError,
  DeadlockError,
  LostError,
  NotSupportedError,
  ConfigError,
  AcquireTimeoutError,
  RedirectError,
  CommandError,
} from './errors.js';
export type { LostReason } from './errors.js';
