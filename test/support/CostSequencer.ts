import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Projects from the costliest file to the cheapest: the long ones start first. */
const byCost = ['chaos', 'e2e', 'int', 'unit'];

/**
 * Starts the costliest projects' files first, so that the minute-long chaos and e2e files do
 * not begin last and leave one worker running alone at the end while the others idle; the
 * seconds-long unit files fill the gaps. Within a project, vitest's own order (failed, then
 * slowest last time, else largest file first). The `alone` project runs after all of them.
 */
export default class CostSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification): number => {
      const at = byCost.indexOf(file.project.name);
      return at === -1 ? byCost.length : at;
    };
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
