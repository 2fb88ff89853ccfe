import { exactJson, neutralise } from '../text/neutralise.js';
import type { CliValues } from './cliOptions.js';

// Everything the CLI prints goes through here. Most of it carries someone else's text (a body,
// a name, a dead letter's headers, a peer's refusal), so human output is neutralised whole, at
// the last moment, by the rule panes use too; `--json` stays exact, its every acting character
// a `\u` escape.

/** Writes human output: neutralised, line breaks and tabs kept, one line break after it. */
export function writeHuman(stream: NodeJS.WritableStream, text: string): void {
  stream.write(`${neutralise(text)}\n`);
}

/** Writes `value` as one line of JSON that parses back to it exactly and prints inert. */
export function writeJson(stream: NodeJS.WritableStream, value: unknown): void {
  stream.write(`${exactJson(value)}\n`);
}

/** A command's result on stdout: as JSON with `--json`, else as `human()` says it. */
export function printResult(values: CliValues, result: unknown, human: () => string): number {
  if (values.json) writeJson(process.stdout, result);
  else writeHuman(process.stdout, human());
  return 0;
}

/**
 * Someone else's text of several lines after a label of `indent` characters: every line after
 * the first indented by as much, so that no line of it can pass for one of the lines around it.
 */
export function block(text: string, indent: number): string {
  return neutralise(text).replace(/\n/g, `\n${' '.repeat(indent)}`);
}
