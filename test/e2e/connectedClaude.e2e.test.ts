import { describeConnectedAgent } from '../support/connectedAgent.js';

// One file per agent, so that the three run side by side (test/support/connectedAgent.ts).
describeConnectedAgent('claude');
