/** See ownSignalFetch.mjs: a fetch whose requests hold the caller's AbortSignal only while they run. */
export function fetchWithOwnSignal(base?: typeof fetch): typeof fetch;
