// `pnpm lint` runs this: every source module of the packages starts with a doc comment saying
// what it holds, a module over `fileLinesMax` lines says at its top why it is one file
// ("longer than 500 lines because …"), and a function over `functionLinesMax` lines says why in
// the comment before it ("longer than 100 lines because …"). Lines are counted as Biome lays
// them out. Exits 1 and lists every finding otherwise.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import ts from 'typescript';

/** A file past this many lines holds more than one thing, unless its doc comment says otherwise. */
const fileLinesMax = 500;
/** A function past this many lines does more than one step, unless the comment before it says otherwise. */
const functionLinesMax = 100;

const files = execFileSync('git', ['ls-files', 'packages/*/src/*.ts', 'packages/*/src/**/*.ts'], { encoding: 'utf8' })
  .split('\n')
  .filter((file, index, all) => file.length > 0 && fs.existsSync(file) && all.indexOf(file) === index);

const findings = [];
for (const file of files) {
  const text = fs.readFileSync(file, 'utf8');
  const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
  const moduleDoc = /^\/\*\*[\s\S]*?\*\//.exec(text)?.[0];
  if (moduleDoc === undefined) findings.push(`${file}: does not start with a doc comment saying what it holds`);
  if (lines > fileLinesMax && !/longer than 500 lines because/i.test(moduleDoc ?? '')) {
    findings.push(`${file}: ${lines} lines, and its doc comment does not say why it is longer than 500 lines`);
  }
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const visit = (node) => {
    const isFunction =
      ts.isFunctionDeclaration(node) ||
      ts.isMethodDeclaration(node) ||
      ts.isConstructorDeclaration(node) ||
      ts.isGetAccessorDeclaration(node) ||
      ts.isArrowFunction(node) ||
      ts.isFunctionExpression(node);
    if (isFunction && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart()).line;
      const last = source.getLineAndCharacterOfPosition(node.end).line;
      const length = last - first + 1;
      if (length > functionLinesMax) {
        // The comment that explains it is the one before the declaration (or before the
        // statement that holds an arrow function).
        let holder = node;
        while (
          holder.parent &&
          !ts.isSourceFile(holder.parent) &&
          !ts.isClassLike(holder.parent) &&
          !ts.isBlock(holder.parent)
        )
          holder = holder.parent;
        const comments = ts.getLeadingCommentRanges(text, holder.getFullStart()) ?? [];
        const said = comments.some((range) => /longer than 100 lines because/i.test(text.slice(range.pos, range.end)));
        const name = node.name?.getText(source) ?? '(a function)';
        if (!said)
          findings.push(`${file}:${first + 1}: ${name} is ${length} lines, and the comment before it does not say why`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
}

if (findings.length > 0) {
  console.error(`check-sizes: ${findings.length} finding(s)\n${findings.map((finding) => `  ${finding}`).join('\n')}`);
  process.exit(1);
}
console.log(`check-sizes: ${files.length} modules, each with its doc comment and within its bounds or saying why`);
