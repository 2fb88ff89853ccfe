/** See ownSignalFetch.mjs: a fetch whose requests hold the caller's AbortSignal only while they run. */
export function fetchWithOwnSignal(base?: typeof fetch): typeof fetch;
/** See ownSignalFetch.mjs: a signal that follows `outer` until `unlink` is called. */
export function linkSignal(outer: AbortSignal): { signal: AbortSignal; unlink: () => void };
