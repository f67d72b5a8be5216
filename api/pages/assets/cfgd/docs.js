// Starts Swagger UI on the schema named by the container's data-url. It is
// a file rather than an inline script so the docs page's
// Content-Security-Policy can stay at script-src 'self'.
window.addEventListener("load", function () {
  var el = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: el.dataset.url,
    domNode: el,
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    // The default validator badge loads an image from validator.swagger.io.
    validatorUrl: null,
  });
});
