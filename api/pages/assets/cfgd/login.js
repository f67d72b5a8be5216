"use strict";
// The sign-in form of the staff pages: a password sign-in that sets the
// session cookie, then a reload into the page.
document.getElementById("login").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const err = document.getElementById("error");
  err.hidden = true;
  try {
    const res = await fetch("/api/auth/login/", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        email: document.getElementById("email").value,
        password: document.getElementById("password").value,
      }),
    });
    if (res.ok) {
      location.reload();
      return;
    }
    let msg = "Sign-in failed (" + res.status + ")";
    try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
    err.textContent = msg;
  } catch (e) {
    err.textContent = "Network error: " + e.message;
  }
  err.hidden = false;
});
