/*
 * eval.h — `vsr eval`: what the router decides for one prompt (the signals
 * that fired with their confidences, the decision and the model), asked of
 * a running vsr's routing preview (POST /api/v1/routing/preview on the
 * management listener) or computed offline from a document.  A readable
 * summary, or with --json the preview's own answer.  See docs/cli.md.
 */
#ifndef VSR_CMD_EVAL_H
#define VSR_CMD_EVAL_H

/* argv[0] is "eval".  Returns the process exit code: 0 answered, 1 the
 * router could not be asked (connection, timeout, a non-200 answer),
 * 2 the document is invalid (offline), 64 usage. */
int vsr_cmd_eval(int argc, char **argv);

#endif /* VSR_CMD_EVAL_H */
