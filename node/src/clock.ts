import { performance } from 'node:perf_hooks';

/** Monotonic milliseconds: every deadline of this package is counted on this clock. */
export const now = (): number => performance.now();
