import type { PaneTarget } from '../wire/paneTarget.js';

/**
 * Upcasts a recorded `spawn.launched` to its current shape. Logs written before the event
 * carried the pane as a value hold its description instead (`tmux:%3`, `herdr:p_1`, or
 * `unknown`), which a STOP after an upgrade must still be able to close: this is the only
 * place that reads that text. The sockets were never in it; the launchers use their own.
 */
export function upcastSpawnLaunched(data: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const { pane } = data;
  if (typeof pane !== 'string') return { ...data };
  return { ...data, pane: paneOfDescription(pane) };
}

function paneOfDescription(text: string): PaneTarget | null {
  if (text.startsWith('tmux:')) return { type: 'tmux', target: text.slice('tmux:'.length) };
  if (text.startsWith('herdr:')) return { type: 'herdr', paneId: text.slice('herdr:'.length) };
  return null;
}
