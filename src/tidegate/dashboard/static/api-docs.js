// tidegate's API docs (/api/docs): Swagger UI, started from this file rather than an inline script,
// so the page runs under the dashboard's Content-Security-Policy (scripts from this server only).
(() => {
  "use strict";
  const root = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.openapi,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null, // the validator badge would send the document to another site
    presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
  });
})();
