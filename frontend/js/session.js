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

export async function loadUser() {
  try {
    current = await get('/api/auth/me', undefined, { quietAuth: true });
  } catch (error) {
    if (error.status === 401) current = null;
    else throw error;
  }
  return current;
}

/** Owner names: the API gives owner ids; admins may list users, others know only themselves. */
const owners = new Map();
let ownersLoaded = false;

export async function ownerName(ownerId) {
  if (ownerId === null || ownerId === undefined) return '—';
  if (current && ownerId === current.id) return current.username;
  if (!ownersLoaded && can('admin')) {
    ownersLoaded = true;
    try {
      for (const u of await get('/api/users')) owners.set(u.id, u.username);
    } catch {
      /* not fatal: fall back to the id */
    }
  }
  return owners.get(ownerId) || `user #${ownerId}`;
}

export function forgetOwners() {
  owners.clear();
  ownersLoaded = false;
}
