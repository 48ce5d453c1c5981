/**
 * A fork bomb for the process-limit tests (exhaustion, containers), as a script file: the command
 * policy refuses a self-calling function in a command, and these tests are about the sandbox's
 * limit, which holds whatever the policy sees.
 */

/**
 * The script: it starts the bomb, then waits until a fork has failed (at most `maxSeconds`), writes
 * the first failure to stderr and ends with "done". A fixed wait is not enough: under gVisor on a busy
 * machine a bomb took over 3 s to reach the cap. At the cap the script itself cannot fork, so it
 * waits with builtins only: a read with a timeout on a fifo it holds open is its sleep, and `read`
 * takes the bombs' first error from their shared stderr file.
 */
export function forkBombScript(maxSeconds = 25): string {
  return [
    "mkfifo .tick-$$ && exec 9<>.tick-$$ && rm .tick-$$",
    "b() { b | b & }",
    "b 2>.bomb-$$.err",
    "first=",
    `while [ -z "$first" ] && [ $SECONDS -lt ${maxSeconds} ]; do read -t 0.2 -u 9; read -r first < .bomb-$$.err; done`,
    'echo "$first" >&2',
    "echo done",
    "",
  ].join("\n");
}
