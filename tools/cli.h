/* Subcommands of the mlakv CLI. Each takes the arguments after its name (argv[0] is the
 * subcommand name) and returns the process exit code: 0 ok, 1 failure, 2 bad arguments. */
#ifndef MLAKV_TOOLS_CLI_H
#define MLAKV_TOOLS_CLI_H

int mlakv_cmd_formats(int argc, char **argv);
int mlakv_cmd_capacity(int argc, char **argv);
int mlakv_cmd_inspect(int argc, char **argv);
int mlakv_cmd_demo(int argc, char **argv);
int mlakv_cmd_eval(int argc, char **argv);
int mlakv_cmd_calibrate(int argc, char **argv);

#endif
