/*
 * The course's Validate in JupyterLab: a toolbar button on every notebook and
 * a dialog that says, in the notebook's language, which exercise to fix first
 * and why (the server side is helpers/lab/validate.py, at course/validate).
 *
 * This file is the extension's whole source. JupyterLab loads an extension as
 * a module-federation container: window._JUPYTERLAB[name] with init(scope),
 * which hands over JupyterLab's shared modules, and get("./extension"), which
 * returns the plugin. The container is written here by hand, so the course
 * needs no JavaScript build: the plugin takes @jupyterlab/apputils, services,
 * coreutils and @lumino/widgets from JupyterLab's own shared scope.
 */
var _JUPYTERLAB = (window._JUPYTERLAB = window._JUPYTERLAB || {});
(function () {
  "use strict";
  var NAME = "transformer-course-validate";
  var ROUTE = "course/validate";
  var scope = null;

  var WORDS = {
    zh: {
      button: "验证",
      tooltip: "运行整本笔记和它的全部测试，告诉你先改哪一个练习",
      running: "正在运行整本笔记和它的测试……（通常不到一分钟）",
      title: "验证结果",
      close: "关闭",
      failed: "没有通过",
      not_done: "还没有完成",
      unanswered: "还没有作答",
      changed: "改动了只读单元格",
      passed: "通过",
      error: "验证没能完成："
    },
    en: {
      button: "Validate",
      tooltip: "Run the whole notebook and all its tests, and see which exercise to fix first",
      running: "Running the notebook and its tests… (usually under a minute)",
      title: "Validation",
      close: "Close",
      failed: "failed",
      not_done: "not done yet",
      unanswered: "not answered yet",
      changed: "read-only cell changed",
      passed: "passed",
      error: "Validation could not finish: "
    }
  };

  function parts(v) {
    return String(v).split(/[.\-+]/).map(function (x) { return parseInt(x, 10) || 0; });
  }

  function older(a, b) {
    var x = parts(a), y = parts(b);
    for (var i = 0; i < Math.max(x.length, y.length); i++) {
      if ((x[i] || 0) !== (y[i] || 0)) { return (x[i] || 0) < (y[i] || 0); }
    }
    return false;
  }

  /* A module JupyterLab shares: the copy it loaded, else the newest offered. */
  function shared(pkg) {
    var versions = scope && scope[pkg];
    if (!versions) { return Promise.reject(new Error(NAME + ": JupyterLab does not share " + pkg)); }
    var keys = Object.keys(versions);
    var pick = keys.filter(function (v) { return versions[v].loaded; })[0] ||
      keys.reduce(function (best, v) { return best === null || older(best, v) ? v : best; }, null);
    return Promise.resolve(versions[pick].get()).then(function (factory) { return factory(); });
  }

  function language(context) {
    var meta = context.model.getMetadata ? context.model.getMetadata("course") : null;
    return meta && meta.lang === "zh" ? "zh" : "en";
  }

  function addStyle() {
    if (document.getElementById(NAME + "-style")) { return; }
    var style = document.createElement("style");
    style.id = NAME + "-style";
    style.textContent = [
      ".course-validate { max-width: 760px; min-width: 420px; line-height: 1.5; }",
      ".course-validate .course-summary { font-weight: 600; margin: 0 0 0.8em 0; }",
      ".course-validate h3 { font-size: 1em; margin: 0.9em 0 0.3em 0; }",
      ".course-validate .course-status { font-weight: normal; margin-left: 0.5em; }",
      ".course-validate pre { white-space: pre-wrap; overflow-wrap: anywhere; margin: 0;",
      "  padding: 0.5em 0.7em; background: var(--jp-layout-color2); color: var(--jp-ui-font-color0);",
      "  border-left: 3px solid var(--jp-error-color1); font-size: var(--jp-code-font-size); }",
      ".course-validate .course-not_done pre, .course-validate .course-unanswered pre {",
      "  border-left-color: var(--jp-warn-color1); }",
      ".course-validate ul { margin: 0.6em 0 0 0; padding-left: 1.2em; }"
    ].join("\n");
    document.head.appendChild(style);
  }

  /* The result (helpers.lab.validate.Result) as the dialog's body. */
  function render(node, result, words) {
    node.textContent = "";
    var summary = document.createElement("p");
    summary.className = "course-summary course-" + result.status;
    summary.textContent = result.summary;
    node.appendChild(summary);
    var done = [];
    result.items.forEach(function (item) {
      if (item.status === "passed") { done.push(item.exercise); return; }
      var block = document.createElement("section");
      block.className = "course-" + item.status;
      var head = document.createElement("h3");
      head.textContent = item.exercise;
      var status = document.createElement("span");
      status.className = "course-status";
      status.textContent = "（" + (words[item.status] || item.status) + "）";
      if (result.lang !== "zh") { status.textContent = "(" + (words[item.status] || item.status) + ")"; }
      head.appendChild(status);
      block.appendChild(head);
      if (item.message) {
        var message = document.createElement("pre");
        message.textContent = item.message;
        block.appendChild(message);
      }
      node.appendChild(block);
    });
    if (done.length && result.status !== "passed") {
      var list = document.createElement("ul");
      done.forEach(function (name) {
        var li = document.createElement("li");
        li.textContent = "✓ " + name;
        list.appendChild(li);
      });
      node.appendChild(list);
    }
    node.setAttribute("data-status", result.status);
  }

  function makePlugin(apputils, services, coreutils, widgets) {
    function validate(app, context, words) {
      var body = new widgets.Widget();
      body.addClass("course-validate");
      body.node.setAttribute("role", "status");
      body.node.setAttribute("aria-live", "polite");
      body.node.setAttribute("data-status", "running");
      body.node.textContent = words.running;
      var dialog = new apputils.Dialog({
        title: words.title,
        body: body,
        buttons: [apputils.Dialog.okButton({ label: words.close })]
      });
      dialog.addClass("course-validate-dialog");
      /* Save what changed first, then open the dialog: JupyterLab queues dialogs,
         so a question the save asks (the file changed on disk, say) would
         otherwise wait behind this dialog while this dialog waits for the save. */
      var saved = context.model.dirty ? Promise.resolve(context.save()) : Promise.resolve();
      var shown = saved.then(function () { return dialog.launch(); },
                             function () { return dialog.launch(); });
      saved.then(function () {
        var settings = app.serviceManager.serverSettings;
        var url = coreutils.URLExt.join(settings.baseUrl, ROUTE);
        return services.ServerConnection.makeRequest(
          url, { method: "POST", body: JSON.stringify({ path: context.path }) }, settings);
      }).then(function (response) {
        if (!response.ok) { throw new Error(response.status + " " + response.statusText); }
        return response.json();
      }).then(function (result) {
        render(body.node, result, words);
      }, function (err) {
        body.node.setAttribute("data-status", "error");
        body.node.textContent = words.error + (err && err.message ? err.message : String(err));
      });
      return shown;
    }

    return {
      id: NAME + ":plugin",
      description: "The course's Validate button and dialog.",
      autoStart: true,
      activate: function (app) {
        addStyle();
        app.docRegistry.addWidgetExtension("Notebook", {
          createNew: function (panel, context) {
            context.ready.then(function () {
              var words = WORDS[language(context)];
              var button = new apputils.ToolbarButton({
                label: words.button,
                tooltip: words.tooltip,
                className: "course-validate-button",
                onClick: function () { validate(app, context, words); }
              });
              panel.toolbar.addItem("course-validate", button);
            });
          }
        });
      }
    };
  }

  /*
   * Widgets that say what changed: an ipywidgets widget given the class
   * "course-live" (chapter 2's calculator: the stage and the mask) becomes a
   * polite live region, so a screen reader reads each new state; ipywidgets has
   * no way to set ARIA attributes itself. Arrow keys on a dropdown or a slider
   * go to it, not to the notebook. A slider's handle is named by the
   * slider's label and says the value its readout shows. And every control of
   * a widget shows a clear focus ring to keyboard users.
   */
  var LIVE = {
    id: NAME + ":live-regions",
    description: "Live regions and visible focus for the course's widgets.",
    autoStart: true,
    activate: function () {
      var style = document.createElement("style");
      style.textContent = ".jp-OutputArea .jupyter-widgets.jupyter-widgets :focus-visible, " +
        ".jp-OutputArea .jupyter-widgets.jupyter-widgets .noUi-handle:focus " +
        "{ outline: 2px solid #1a5fb4 !important; outline-offset: 1px !important; }";
      document.head.appendChild(style);
      var queued = false;
      function mark() {
        queued = false;
        document.querySelectorAll(".course-live:not([aria-live])").forEach(function (el) {
          el.setAttribute("role", "status");
          el.setAttribute("aria-live", "polite");
          el.setAttribute("aria-atomic", "true");
        });
        /* arrow keys on a dropdown or a slider change it: without this JupyterLab's
           notebook takes ArrowUp/ArrowDown (select the cell above or below) first */
        document.querySelectorAll(".jupyter-widgets select:not([data-lm-suppress-shortcuts]), " +
          ".jupyter-widgets [role=slider]:not([data-lm-suppress-shortcuts])").forEach(function (el) {
          el.setAttribute("data-lm-suppress-shortcuts", "true");
        });
        /* ipywidgets' sliders: the handle (role=slider) gets the slider's label as
           its name and the readout (the value shown, e.g. d_k = 128 rather
           than the option's index) as its aria-valuetext */
        document.querySelectorAll(".jupyter-widgets .noUi-handle[role=slider]").forEach(function (handle) {
          var box = handle.closest(".widget-slider, .widget-hslider, .widget-vslider, .widget-inline-hbox");
          if (!box) { return; }
          var label = box.querySelector(".widget-label");
          var name = label && label.textContent.trim();
          if (name && handle.getAttribute("aria-label") !== name) { handle.setAttribute("aria-label", name); }
          var readout = box.querySelector(".widget-readout");
          var value = readout && readout.textContent.trim();
          if (value && handle.getAttribute("aria-valuetext") !== value) { handle.setAttribute("aria-valuetext", value); }
        });
      }
      mark();
      new MutationObserver(function () {
        if (!queued) { queued = true; window.requestAnimationFrame(mark); }
      }).observe(document.body, { childList: true, subtree: true, characterData: true, attributes: true,
                                  attributeFilter: ["class"] });
    }
  };

  _JUPYTERLAB[NAME] = {
    init: function (shareScope) { scope = shareScope; },
    get: function (module) {
      if (module !== "./extension") {
        return Promise.reject(new Error(NAME + ": no module " + module));
      }
      return Promise.all(["@jupyterlab/apputils", "@jupyterlab/services", "@jupyterlab/coreutils", "@lumino/widgets"]
        .map(shared)).then(function (m) {
        var plugin = makePlugin(m[0], m[1], m[2], m[3]);
        return function () { return { __esModule: true, "default": [plugin, LIVE] }; };
      });
    }
  };
})();
