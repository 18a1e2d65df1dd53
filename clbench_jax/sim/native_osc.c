/* robosuite 1.4's OSC_POSE torque law (controllers/osc.py run_controller, fixed impedance, uncoupled position /
 * orientation, null-space pull to the initial joints, gravity and bias compensation) as a MuJoCo control
 * callback, so the native backend recomputes it at every physics substep inside mujoco.rollout's threads, as
 * robosuite does in Python. It reads the goal and the addresses from mjData.userdata (layout: robot.py U_*),
 * and does nothing for a model whose userdata does not start with the magic number. The goal itself (set once
 * per 20 Hz action) and the gripper's ramp are computed in JAX (control.py), the same on every backend.
 * MuJoCo clamps ctrl to the motors' ctrlrange, which is exactly robosuite's torque clip.
 */
#include <math.h>
#include <mujoco/mujoco.h>

enum { U_MAGIC = 0, U_SITE = 1, U_DOF = 2, U_QPOS = 9, U_ACT = 16, U_GOAL_POS = 23, U_GOAL_ORI = 26,
       U_QINIT = 35, U_KP = 42, U_KD = 43, U_NULL_KP = 44, NUSERDATA = 45 };
#define MAGIC 1234567.0
#define N 7

/* Inverse of a symmetric positive-definite n x n matrix (n <= 7) by Cholesky; falls back to zero on failure. */
static void spd_inverse(const mjtNum* a, mjtNum* inv, int n) {
  mjtNum l[N * N], col[N];
  for (int i = 0; i < n * n; i++) l[i] = a[i];
  if (mju_cholFactor(l, n, 0) < n) {
    for (int i = 0; i < n * n; i++) inv[i] = 0;
    return;
  }
  for (int j = 0; j < n; j++) {
    for (int i = 0; i < n; i++) col[i] = (i == j);
    mju_cholSolve(col, l, col, n);
    for (int i = 0; i < n; i++) inv[i * n + j] = col[i];
  }
}

/* out (r x r) = A (r x N) Minv (N x N) A^T */
static void project(const mjtNum* a, const mjtNum* minv, mjtNum* out, int r) {
  mjtNum am[6 * N];
  for (int i = 0; i < r; i++)
    for (int j = 0; j < N; j++) {
      mjtNum s = 0;
      for (int k = 0; k < N; k++) s += a[i * N + k] * minv[k * N + j];
      am[i * N + j] = s;
    }
  for (int i = 0; i < r; i++)
    for (int j = 0; j < r; j++) {
      mjtNum s = 0;
      for (int k = 0; k < N; k++) s += am[i * N + k] * a[j * N + k];
      out[i * r + j] = s;
    }
}

void clbench_osc(const mjModel* m, mjData* d) {
  if (m->nuserdata < NUSERDATA || d->userdata[U_MAGIC] != MAGIC) return;
  const mjtNum* u = d->userdata;
  const int nv = m->nv, site = (int)u[U_SITE];
  int dof[N], qadr[N], act[N];
  for (int i = 0; i < N; i++) {
    dof[i] = (int)u[U_DOF + i];
    qadr[i] = (int)u[U_QPOS + i];
    act[i] = (int)u[U_ACT + i];
  }
  mj_markStack(d);
  mjtNum* jacp = mj_stackAllocNum(d, 3 * nv);
  mjtNum* jacr = mj_stackAllocNum(d, 3 * nv);
  mjtNum* full = mj_stackAllocNum(d, nv * nv);
  mj_jacSite(m, d, jacp, jacr, site);
  mj_fullM(m, d, full);

  mjtNum j[6 * N], mass[N * N], minv[N * N], q[N], qd[N], vel[6] = {0};
  for (int i = 0; i < N; i++) {
    q[i] = d->qpos[qadr[i]];
    qd[i] = d->qvel[dof[i]];
    for (int r = 0; r < 3; r++) {
      j[r * N + i] = jacp[r * nv + dof[i]];
      j[(3 + r) * N + i] = jacr[r * nv + dof[i]];
    }
    for (int k = 0; k < N; k++) mass[i * N + k] = full[dof[i] * nv + dof[k]];
  }
  /* end-effector velocity: the full Jacobian times the full qvel (robosuite's get_site_xvelp / xvelr) */
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < nv; k++) {
      vel[r] += jacp[r * nv + k] * d->qvel[k];
      vel[3 + r] += jacr[r * nv + k] * d->qvel[k];
    }
  const mjtNum* pos = d->site_xpos + 3 * site;
  const mjtNum* rc = d->site_xmat + 9 * site;  /* current orientation, row-major */
  const mjtNum* rd = u + U_GOAL_ORI;           /* goal orientation, row-major */
  const mjtNum kp = u[U_KP], kd = u[U_KD];
  mjtNum wrench_in[6], ori_err[3] = {0};
  for (int c = 0; c < 3; c++) { /* 0.5 * sum_c cross(current[:, c], goal[:, c]) */
    mjtNum a[3] = {rc[c], rc[3 + c], rc[6 + c]}, b[3] = {rd[c], rd[3 + c], rd[6 + c]};
    ori_err[0] += 0.5 * (a[1] * b[2] - a[2] * b[1]);
    ori_err[1] += 0.5 * (a[2] * b[0] - a[0] * b[2]);
    ori_err[2] += 0.5 * (a[0] * b[1] - a[1] * b[0]);
  }
  for (int r = 0; r < 3; r++) {
    wrench_in[r] = kp * (u[U_GOAL_POS + r] - pos[r]) - kd * vel[r];
    wrench_in[3 + r] = kp * ori_err[r] - kd * vel[3 + r];
  }
  spd_inverse(mass, minv, N);
  mjtNum lpos_inv[9], lori_inv[9], lfull_inv[36], lpos[9], lori[9], lfull[36];
  project(j, minv, lpos_inv, 3);
  project(j + 3 * N, minv, lori_inv, 3);
  project(j, minv, lfull_inv, 6);
  spd_inverse(lpos_inv, lpos, 3);
  spd_inverse(lori_inv, lori, 3);
  spd_inverse(lfull_inv, lfull, 6);
  mjtNum wrench[6] = {0};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++) {
      wrench[r] += lpos[r * 3 + k] * wrench_in[k];
      wrench[3 + r] += lori[r * 3 + k] * wrench_in[3 + k];
    }
  /* null space: N = I - Jbar J with Jbar = Minv J^T Lfull; torques += N^T M (kp (q0 - q) - kv qd) */
  mjtNum jbar[N * 6], nmat[N * N], pose[N], target[N];
  const mjtNum nkp = u[U_NULL_KP], nkv = 2.0 * sqrt(nkp);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < 6; c++) {
      mjtNum s = 0;
      for (int k = 0; k < N; k++)
        for (int l = 0; l < 6; l++) s += minv[i * N + k] * j[l * N + k] * lfull[l * 6 + c];
      jbar[i * 6 + c] = s;
    }
  for (int i = 0; i < N; i++)
    for (int k = 0; k < N; k++) {
      mjtNum s = (i == k);
      for (int c = 0; c < 6; c++) s -= jbar[i * 6 + c] * j[c * N + k];
      nmat[i * N + k] = s;
    }
  for (int i = 0; i < N; i++) target[i] = nkp * (u[U_QINIT + i] - q[i]) - nkv * qd[i];
  for (int i = 0; i < N; i++) {
    mjtNum s = 0;
    for (int k = 0; k < N; k++) s += mass[i * N + k] * target[k];
    pose[i] = s;
  }
  for (int i = 0; i < N; i++) {
    mjtNum tau = d->qfrc_bias[dof[i]];
    for (int r = 0; r < 6; r++) tau += j[r * N + i] * wrench[r];
    for (int k = 0; k < N; k++) tau += nmat[k * N + i] * pose[k];
    d->ctrl[act[i]] = tau;
  }
  mj_freeStack(d);
}
