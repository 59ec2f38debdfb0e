#!/usr/bin/env node
// The streamstack command; the program lives in ../dist (built by `pnpm build`).
import { main } from '../dist/main.js';

process.exitCode = await main(process.argv);
