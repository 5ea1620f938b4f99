/*
 * qemu TCG plugin: count executed guest instructions (tvm_pool.emulation).
 *
 *   qemu-aarch64 -plugin insn_count.so,out=FILE ... PROGRAM
 *
 * Every translated block adds its instruction count to one counter, inline, each time it runs
 * (not atomic: count on one thread, TVM_NUM_THREADS=1). A guest marks a point with the unused
 * syscall 4000 (first argument: a tag); each mark writes "mark TAG COUNT" and the exit writes
 * "total COUNT" to FILE (stderr without out=). A mark's count includes the instructions up to
 * its syscall, so the difference of two marks is what ran between them.
 */
#include <stdio.h>
#include <string.h>

#include "qemu-plugin-api.h"

#define MARK_SYSCALL 4000

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

static uint64_t insn_count;
static FILE *out;

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &insn_count,
                                           (uint64_t)qemu_plugin_tb_n_insns(tb));
}

static void syscall_cb(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2,
                       uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8) {
  (void)id; (void)vcpu; (void)a2; (void)a3; (void)a4; (void)a5; (void)a6; (void)a7; (void)a8;
  if (num == MARK_SYSCALL) {
    fprintf(out, "mark %llu %llu\n", (unsigned long long)a1, (unsigned long long)insn_count);
    fflush(out);
  }
}

static void at_exit(qemu_plugin_id_t id, void *p) {
  (void)id; (void)p;
  fprintf(out, "total %llu\n", (unsigned long long)insn_count);
  fflush(out);
  if (out != stderr) fclose(out);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
  (void)info;
  out = stderr;
  for (int i = 0; i < argc; i++) {
    if (strncmp(argv[i], "out=", 4) == 0) {
      out = fopen(argv[i] + 4, "w");
      if (!out) return -1;
    }
  }
  qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
  qemu_plugin_register_vcpu_syscall_cb(id, syscall_cb);
  qemu_plugin_register_atexit_cb(id, at_exit, NULL);
  return 0;
}
