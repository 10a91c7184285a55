// Starts Swagger UI on the reference page (GET /docs). It is a file of its own, not an inline
// script, so that the page's Content-Security-Policy can forbid inline scripts.
window.ui = SwaggerUIBundle({
  // Relative to the page, so the page works wherever the service is mounted.
  url: 'openapi.json',
  dom_id: '#docs',
  // Without this, Swagger UI sends the document's address to an outside validator.
  validatorUrl: null,
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout',
  defaultModelsExpandDepth: 2,
  defaultModelExpandDepth: 2,
  displayRequestDuration: true,
})
