export { Client } from './client.js';
export type { ClientOptions } from './client.js';
export { Lock, ReadWriteLock, Semaphore } from './locks.js';
export type {
  LockOptions,
  AcquireOptions,
  WaitOptions,
  SemaphoreOptions,
  SemaphoreAcquireOptions,
  SemaphoreWaitOptions,
} from './locks.js';
export { Held } from './hold.js';
export type { Kind, LockInfo, Holder, Waiter } from './protocol.js';
export {
  DlockError,
  ModuleNotLoadedError,
  ServerConnectionError,
  ResponseTimeoutError,
  WrongTypeError,
  DeadlockError,
  LostError,
  NotHeldError,
  ClosedError,
  NotSupportedError,
  ConfigError,
  AcquireTimeoutError,
  RedirectError,
  CommandError,
} from './errors.js';
export type { LostReason } from './errors.js';
