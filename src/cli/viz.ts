import { BridgeError, ErrorCode } from '../errors.js';
import type { CliValues } from './main.js';

/** `bridge viz`: every machine as a Mermaid state diagram and an offline HTML page. */
export function runViz(_values: CliValues, _rest: string[]): number {
  throw new BridgeError(ErrorCode.notAvailable, 'bridge viz is being built');
}
