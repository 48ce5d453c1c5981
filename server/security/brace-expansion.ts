/**
 * bash's brace expansion, as the policy uses it to see the names a word stands for.
 */

/** Most words one brace expansion may give before the rest is not judged. */
const MAX_BRACE_WORDS = 256;

/** bash's brace expansion of a word (`.env{,}` → `.env .env`, `{a,b}c` → `ac bc`), bounded. */
export function braceExpand(word: string): string[] {
  const open = word.indexOf("{");
  if (open < 0) return [word];
  let depth = 0;
  const commas: number[] = [];
  for (let i = open; i < word.length; i++) {
    const c = word[i];
    if (c === "\\") {
      i++;
      continue;
    }
    if (c === "{") depth++;
    else if (c === "}") {
      depth--;
      if (depth === 0) {
        const head = word.slice(0, open);
        const tail = word.slice(i + 1);
        const body = word.slice(open + 1, i);
        let parts: string[];
        if (commas.length > 0) {
          parts = [];
          let from = open + 1;
          for (const at of [...commas, i]) {
            parts.push(word.slice(from, at));
            from = at + 1;
          }
        } else {
          const range = /^(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])$/.exec(body);
          // `{x}` without a comma stays as it is; a range is judged by its ends.
          if (!range) return braceExpand(tail).map((t) => head + word.slice(open, i + 1) + t);
          parts = [range[1], range[2]];
        }
        const out: string[] = [];
        for (const p of parts) {
          for (const t of braceExpand(p + tail)) {
            out.push(head + t);
            if (out.length >= MAX_BRACE_WORDS) return out;
          }
        }
        return out;
      }
    } else if (c === "," && depth === 1) commas.push(i);
  }
  return [word];
}
