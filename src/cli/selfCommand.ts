import { fileURLToPath } from 'node:url';

/**
 * This CLI's entry point, for what runs it again on its own with this Node (the systemd unit,
 * the agent host of a spawned worker).
 */
export const selfCli = fileURLToPath(new URL('./main.js', import.meta.url));
