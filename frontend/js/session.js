// The signed-in user and what their role may do (viewer < operator < admin), as the API enforces it.

import { get } from './api.js';

const RANK = { viewer: 0, operator: 1, admin: 2 };
let current = null;

export function user() {
  return current;
}

export function setUser(value) {
  current = value;
}

/** Whether the signed-in user has at least ``role``. */
export function can(role) {
  return current !== null && RANK[current.role] >= RANK[role];
}

/** Whether the signed-in user may cancel, resume or fork what ``ownerName`` owns: its owner (an
 * operator) or an admin, as the API enforces it. */
export function mayAct(ownerName) {
  return can('admin') || (can('operator') && ownerName === current.username);
}

export async function loadUser() {
  try {
    current = await get('/api/auth/me', undefined, { quietAuth: true });
  } catch (error) {
    if (error.status === 401) current = null;
    else throw error;
  }
  return current;
}
