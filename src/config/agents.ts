/** The coding agents bridge connects (`bridge connect`) and a spawn profile may name (`agent`). */
export const agents = ['claude', 'codex', 'gemini'] as const;
export type Agent = (typeof agents)[number];
