/**
 * The anywidget host (built separately into explorer/static/widget.js).
 * Contract with explorer/widget.py: traits `bundle`, `enabled_passes`,
 * `status`; toggles set `enabled_passes` and save; Re-run also sends
 * {type: "rerun", enabled_passes: [...]}.
 */
import { ExplorerView } from './view/explorer_view';
import { injectWidgetStyles } from './widget_style';

/** The part of anywidget's model API this host uses. */
export interface AnyWidgetModel {
  get(name: string): unknown;
  set(name: string, value: unknown): void;
  save_changes(): void;
  send(content: unknown): void;
  on(event: string, callback: () => void): void;
  off(event: string, callback: () => void): void;
}

function asPassList(value: unknown): string[] | null {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : null;
}

function asStatus(value: unknown): string {
  if (value === null || value === undefined) {
    return '';
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function render({ model, el }: { model: AnyWidgetModel; el: HTMLElement }): () => void {
  injectWidgetStyles(el.ownerDocument);
  const view = new ExplorerView({
    interactive: true,
    setEnabledPasses: names => {
      model.set('enabled_passes', names);
      model.save_changes();
    },
    rerun: names => {
      model.set('enabled_passes', names);
      model.save_changes();
      model.send({ type: 'rerun', enabled_passes: names });
    }
  });
  el.appendChild(view.node);
  const onBundle = () => view.setBundle(model.get('bundle'));
  const onEnabled = () => view.setEnabledPasses(asPassList(model.get('enabled_passes')));
  const onStatus = () => view.setStatus(asStatus(model.get('status')));
  onEnabled();
  onBundle();
  onStatus();
  model.on('change:bundle', onBundle);
  model.on('change:enabled_passes', onEnabled);
  model.on('change:status', onStatus);
  return () => {
    model.off('change:bundle', onBundle);
    model.off('change:enabled_passes', onEnabled);
    model.off('change:status', onStatus);
    view.dispose();
  };
}

// anywidget's ESM contract: a default export with render (a bare named export is deprecated).
export default { render };
