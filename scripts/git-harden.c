/*
 * aw-git-harden.so — git's command-running configuration off for every git a workspace runs,
 * by configuration no repository, config file, `-c` option or environment variable can undo.
 *
 * Loaded into every dynamically linked process of the workspace image through /etc/ld.so.preload
 * (scripts/build-base-image.sh), which the loader reads whatever the environment says and which
 * the sandbox cannot change (a read-only root filesystem). It replaces getenv():
 *
 * - GIT_CONFIG_PARAMETERS, the variable through which git passes command-line configuration
 *   (`-c`, `--config-env`) to itself and its children, is answered with FORCED appended. git reads
 *   it after every other source (system, global, repository, worktree, includes), and a key's last
 *   value wins, so FORCED holds against all of them;
 * - the variables that name a program git runs (GIT_SSH_COMMAND, GIT_EXTERNAL_DIFF, …) read as
 *   unset, and GIT_EDITOR, GIT_SEQUENCE_EDITOR and GIT_PAGER as ":" and "cat", which git never
 *   executes.
 *
 * What configuration cannot switch off — drivers a repository names in .gitattributes (diff
 * drivers and textconv, merge drivers, filters), diff.external and `!` aliases — git runs as
 * commands of the sandbox user, which the kernel's program allowlist bounds like any other.
 *
 * A library loaded before this one could answer getenv() itself (LD_PRELOAD naming libc): the
 * constructor then ends the process, since git would run unhardened. Programs that define their
 * own getenv (bash does) keep it; bash reads no git configuration.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* git's quoting of command-line configuration: 'key'='value' pairs separated by spaces. */
static const char FORCED[] =
    " 'core.hookspath'='/dev/null'"
    " 'core.fsmonitor'='false'"
    " 'core.sshcommand'='false'"
    " 'core.askpass'='false'"
    " 'core.editor'=':'"
    " 'core.pager'='cat'"
    " 'sequence.editor'=':'"
    " 'credential.helper'=''"
    " 'commit.gpgsign'='false'"
    " 'tag.gpgsign'='false'"
    " 'gpg.program'='false'"
    " 'protocol.ext.allow'='never'"
    /* Sealed files (executor/seal.ts) changed owner, mode and ctime, not content. */
    " 'core.trustctime'='false'"
    " 'core.checkstat'='minimal'";

/* Variables that name a program git runs: they read as unset. */
static const char *const UNSET[] = {
    "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_PROXY_COMMAND", "GIT_ASKPASS",
    "SSH_ASKPASS", "GIT_EXEC_PATH", "GIT_TEMPLATE_DIR", NULL,
};

static const char *lookup(const char *name) {
  size_t n = strlen(name);
  if (environ == NULL) return NULL;
  for (char **e = environ; *e != NULL; e++) {
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return NULL;
}

/* The last GIT_CONFIG_PARAMETERS value seen and its hardened form (git reads it often). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *last_seen;
static char *last_answer;

static char *aw_getenv(const char *name) {
  if (name == NULL || strncmp(name, "GIT_", 4) != 0) {
    if (name != NULL && strcmp(name, "SSH_ASKPASS") == 0) return NULL;
    return (char *)lookup(name);
  }
  for (const char *const *u = UNSET; *u != NULL; u++) {
    if (strcmp(name, *u) == 0) return NULL;
  }
  if (strcmp(name, "GIT_EDITOR") == 0 || strcmp(name, "GIT_SEQUENCE_EDITOR") == 0) return (char *)":";
  if (strcmp(name, "GIT_PAGER") == 0) return (char *)"cat";
  const char *value = lookup(name);
  if (strcmp(name, "GIT_CONFIG_PARAMETERS") != 0) return (char *)value;
  pthread_mutex_lock(&lock);
  char *answer = last_answer;
  if (!(answer != NULL && value == last_seen)) {
    size_t have = value ? strlen(value) : 0;
    answer = malloc(have + sizeof(FORCED));
    if (answer == NULL) abort();
    memcpy(answer, value ? value : "", have);
    /* FORCED starts with the space that separates it from what git set; alone it needs none. */
    if (have == 0) memcpy(answer, FORCED + 1, sizeof(FORCED) - 1);
    else memcpy(answer + have, FORCED, sizeof(FORCED));
    /* An earlier answer may still be in use by its caller; it is kept (a few bytes per change). */
    last_seen = value;
    last_answer = answer;
  }
  pthread_mutex_unlock(&lock);
  return answer;
}

char *getenv(const char *name) __attribute__((alias("aw_getenv")));

__attribute__((constructor)) static void check_bound(void) {
  void *bound = dlsym(RTLD_DEFAULT, "getenv");
  if (bound == NULL || bound == (void *)aw_getenv) return;
  /* The program's own getenv (bash's) is its business; a library's in front of this one is not. */
  Dl_info where;
  struct link_map *owner = NULL;
  struct link_map *program = NULL;
  void *self = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
  if (self != NULL && dlinfo(self, RTLD_DI_LINKMAP, &program) == 0 && dladdr1(bound, &where, (void **)&owner, RTLD_DL_LINKMAP) != 0 && owner == program) return;
  static const char msg[] = "agent-workspace: a library loaded before the sandbox's own replaces getenv (LD_PRELOAD?); refusing to run\n";
  ssize_t ignored = write(2, msg, sizeof(msg) - 1);
  (void)ignored;
  _exit(126);
}
