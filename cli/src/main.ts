#!/usr/bin/env node
// The sandpit command. Its commands arrive with the CLI work (see cli/README.md once written).
console.error("sandpit: no commands yet");
process.exit(2);
